"""The shared context files: one per distinct content, read-only, gone with the last lease (issue 41)."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import stat
import threading
from collections.abc import Iterator

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import INLINE_WRITE_CHARS
from rlm_adapters.core.sandbox.context_store import ContextStore
from rlm_adapters.errors import SandboxError

BIG = "a line of the shared context\n" * (2 * INLINE_WRITE_CHARS // 29)  # written in a thread


@pytest.fixture
def store() -> Iterator[ContextStore]:
    fresh = ContextStore()
    yield fresh
    fresh.reset()


async def test_leases_of_one_context_share_one_read_only_file_removed_after_the_last(store: ContextStore) -> None:
    context = validate_context(BIG)
    leases = await asyncio.gather(*(store.acquire(context) for _ in range(8)))
    assert store.files_written == 1 and len({lease.path for lease in leases}) == 1
    path = leases[0].path
    assert path.read_bytes() == BIG.encode()
    assert path.name == hashlib.sha256(BIG.encode()).hexdigest() + ".txt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for lease in leases[:-1]:
        lease.release()
        lease.release()  # idempotent: a second release takes nothing from the others
    assert path.exists() and store.files() == [path]
    leases[-1].release()
    assert not path.exists() and store.files() == []


async def test_equal_contents_in_other_objects_join_one_file_and_others_get_their_own(store: ContextStore) -> None:
    first = await store.acquire(validate_context(BIG))
    equal = await store.acquire(validate_context("".join([BIG[:10], BIG[10:]])))  # another str, the same text
    other = await store.acquire(validate_context(BIG + "!"))
    assert equal.path == first.path and other.path != first.path
    assert store.files_written == 2 and sorted(store.files()) == sorted([first.path, other.path])
    assert other.path.read_bytes() == (BIG + "!").encode()
    for lease in (first, equal, other):
        lease.release()
    assert store.files() == [] and not any(store._ensure_folder().iterdir())


async def test_a_text_and_a_json_context_of_the_same_bytes_are_two_files(store: ContextStore) -> None:
    text = await store.acquire(validate_context('["a"]'))
    listed = await store.acquire(validate_context(["a"]))
    assert text.path.read_bytes() == listed.path.read_bytes() == b'["a"]'
    assert text.path != listed.path and {text.path.suffix, listed.path.suffix} == {".txt", ".json"}


async def test_a_dict_changed_between_runs_is_written_again_never_served_stale(store: ContextStore) -> None:
    data = {"k": "before"}
    before = await store.acquire(validate_context(data))
    data["k"] = "after"  # the same object, mutated while the first lease lives
    after = await store.acquire(validate_context(data))
    assert json.loads(before.path.read_text()) == {"k": "before"}
    assert json.loads(after.path.read_text()) == {"k": "after"}


async def test_a_cancelled_lease_neither_stops_the_write_for_others_nor_keeps_the_file(store: ContextStore) -> None:
    started, go_on = threading.Event(), threading.Event()
    real = store._write_file

    def slow_write(context: object) -> object:
        started.set()
        assert go_on.wait(30)
        return real(context)  # type: ignore[arg-type]

    store._write_file = slow_write  # type: ignore[method-assign,assignment]
    context = validate_context(BIG)
    cancelled = asyncio.create_task(store.acquire(context))
    assert await asyncio.to_thread(started.wait, 30)
    write = store._by_object[id(BIG)]
    waiting = asyncio.create_task(store.acquire(context))  # joins the same write
    await asyncio.sleep(0)
    cancelled.cancel()
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    lease = await waiting
    assert lease.path.read_bytes() == BIG.encode() and store.files_written == 1
    lease.release()
    await asyncio.wrap_future(write.done)  # its release callbacks ran before this waiter's
    assert store.files() == [] and not lease.path.exists()


async def test_a_write_that_fails_is_a_sandbox_error_and_the_next_lease_writes_again(store: ContextStore) -> None:
    real = store._write_file
    failures = [OSError(errno.ENOSPC, "No space left on device")]

    def flaky(context: object) -> object:
        if failures:
            raise failures.pop()
        return real(context)  # type: ignore[arg-type]

    store._write_file = flaky  # type: ignore[method-assign,assignment]
    context = validate_context(BIG)
    with pytest.raises(SandboxError, match=r"cannot write the shared context file: .*No space left"):
        await store.acquire(context)
    lease = await store.acquire(context)
    assert lease.path.read_bytes() == BIG.encode() and store.files_written == 1


async def test_reset_removes_the_folder(store: ContextStore) -> None:
    lease = await store.acquire(validate_context("small"))
    folder = lease.path.parent
    store.reset()
    assert not folder.exists() and store.files() == [] and store.files_written == 0
    lease.release()  # a lease from before the reset is harmless
