"""Cache files someone else could have written: links, other users' files, damaged ones. Refused, never written."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm_adapters import RLM, ScriptedModel, testing
from rlm_adapters.core.cache import CachedReply, SQLiteCallCache
from rlm_adapters.errors import CacheError

STRANGER = 54_321  # a uid that is not ours


def by_turn(*replies: str) -> ScriptedModel:
    return testing.by_turn(*replies, model_name="root")


def cache_with(path: Path, entries: int = 3) -> bytes:
    """A real cache holding `entries` replies, closed (its WAL folded in); returns its bytes."""

    async def fill() -> None:
        store = SQLiteCallCache(path)
        await asyncio.gather(
            *(store.put(f"k{i}#0", CachedReply(f"reply {i} " * 40, 1, 1, "m", 0.0)) for i in range(entries))
        )
        store.close()

    asyncio.run(fill())
    return path.read_bytes()


def refused(path: Path, says: str) -> CacheError:
    with pytest.raises(CacheError, match=says) as info:
        SQLiteCallCache(path)
    message = str(info.value)
    assert "\n" not in message and repr(str(path)) in message and "left as it is" in message
    return info.value


def as_root() -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root (chown)")


def test_a_link_to_a_real_cache_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "real.sqlite"
    before = cache_with(target)
    link = tmp_path / "calls.sqlite"
    link.symlink_to(target)
    refused(link, "is a symbolic link")
    assert target.read_bytes() == before and not Path(f"{link}-wal").exists()


def test_a_link_to_an_empty_file_is_not_followed_to_stamp_it(tmp_path: Path) -> None:
    victim = tmp_path / "someone-elses-empty-file"
    victim.touch()
    link = tmp_path / "calls.sqlite"
    link.symlink_to(victim)
    refused(link, "is a symbolic link")
    assert victim.read_bytes() == b""  # a blank file would have been made a cache through the link


def test_a_dangling_link_is_never_followed_to_create_a_file(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "made-by-us.sqlite"
    link = tmp_path / "calls.sqlite"
    link.symlink_to(target)
    refused(link, "is a symbolic link")
    assert not target.exists() and not target.parent.exists()


@pytest.mark.parametrize("filled", [True, False], ids=["a cache", "an empty file"])
def test_a_file_anyone_can_write_is_refused_with_its_mode_and_left_as_it_is(tmp_path: Path, filled: bool) -> None:
    path = tmp_path / "calls.sqlite"
    before = cache_with(path) if filled else b""
    path.touch()
    os.chmod(path, 0o666)
    error = refused(path, r"can be written by any user \(mode 666\)")
    assert "chmod 600" in error.reason
    assert path.read_bytes() == before and (path.stat().st_mode & 0o777) == 0o666


@pytest.mark.parametrize("mode", [0o660, 0o620, 0o2660])
def test_a_cache_its_group_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    """Issue 35, item 4: a 0660 cache (a setgid team folder) opened with a warning; a member planted replies."""
    path = tmp_path / "calls.sqlite"
    before = cache_with(path)
    os.chmod(path, mode)
    error = refused(path, f"can be written by its group \\(mode {mode:o}\\)")
    assert "chmod 600" in error.reason
    assert path.read_bytes() == before and (path.stat().st_mode & 0o7777) == mode


def test_another_users_cache_is_refused_naming_the_owner(tmp_path: Path) -> None:
    as_root()
    path = tmp_path / "calls.sqlite"
    before = cache_with(path)
    os.chown(path, STRANGER, STRANGER)
    refused(path, f"belongs to another user \\(uid {STRANGER}\\)")
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("plant", "says"),
    [
        (lambda p: os.chmod(p, 0o666), "its -wal file can be written by any user"),
        (lambda p: (as_root(), os.chown(p, STRANGER, STRANGER)), "its -wal file belongs to another user"),
        (lambda p: (p.unlink(), p.symlink_to("/etc/hostname")), "its -wal file is a symbolic link"),
    ],
    ids=["world-writable", "another user's", "a link"],
)
def test_a_planted_journal_beside_a_good_cache_is_refused(
    tmp_path: Path, plant: Callable[[Path], object], says: str
) -> None:
    path = tmp_path / "calls.sqlite"
    before = cache_with(path)
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)  # a WAL header: SQLite would read frames from it
    os.chmod(wal, 0o600)
    plant(wal)
    refused(path, says)
    assert path.read_bytes() == before


def damage(path: Path) -> bytes:
    """Overwrite every page after the schema and the table's root: each lookup reads a damaged page."""
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 4 * page, "the cache must span several pages"
    data[2 * page :] = b"\xa5" * (len(data) - 2 * page)
    path.write_bytes(bytes(data))
    return bytes(data)


async def test_a_cache_found_damaged_is_neither_read_nor_written_again(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    await asyncio.to_thread(cache_with, path, 400)
    before = damage(path)
    store = SQLiteCallCache(path)  # its stamp and table are intact: the damage shows on the first lookup
    with pytest.raises(CacheError, match="is damaged") as info:
        await store.get("k7#0")
    assert "\n" not in str(info.value) and repr(str(path)) in str(info.value)
    with pytest.raises(CacheError, match="is damaged"):
        await store.put("new#0", CachedReply("never written", 1, 1, "m", 0.0))
    store.close()
    assert path.read_bytes() == before


def test_a_run_over_a_damaged_cache_goes_live_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calls.sqlite"
    cache_with(path, 400)
    before = damage(path)
    leaf = ScriptedModel(lambda m: "leaf says hi", model_name="leaf")
    root = by_turn("```repl\nprint(llm_query_batched(['a', 'b', 'c']))\n```", "FINAL(done)")
    rlm = RLM(backend=root, other_backends=[leaf], environment="local", cache=path)
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.cache"):
        result = rlm.completion("ctx", "q")
    rlm.close()
    assert result.response == "done" and len(leaf.calls) == 3
    warnings = [r.getMessage() for r in caplog.records if r.name == "rlm_adapters.cache"]
    assert len(warnings) == 1 and str(path) in warnings[0] and "is damaged" in warnings[0]
    assert path.read_bytes() == before
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] != 0  # still the file it was, stamp and all
    db.close()
