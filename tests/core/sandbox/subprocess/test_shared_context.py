"""N runs over one context: one read-only file, mapped by every worker, and still no run reaches another (issue 41)."""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import INLINE_WRITE_CHARS, SandboxSetup
from rlm_adapters.core.sandbox.context_store import CONTEXTS
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox
from tests.core.sandbox.helpers import echo_handler

TEXT = "".join(f"line {i:07d} of the one shared context\n" for i in range(2 * INLINE_WRITE_CHARS // 36))
DIGEST = hashlib.sha256(TEXT.encode()).hexdigest()

if not SubprocessSandbox().shares_context:
    pytest.skip(
        "no level here keeps a shared context file read-only (apt-get install bubblewrap, or a kernel with "
        "Landlock ABI 3)",
        allow_module_level=True,
    )

# What a run sees: its context's digest, and the file whose mapping holds the context's characters.
SEEN = textwrap.dedent(
    """
    import hashlib, sys
    start = id(context) + sys.getsizeof(context) - len(context) - 1
    rows = [line.split() for line in open("/proc/self/maps")]
    backing = [r[5] for r in rows if len(r) == 6 and int(r[0].split("-")[0], 16) <= start < int(r[0].split("-")[1], 16)]
    print(type(context).__name__, hashlib.sha256(context.encode("utf-8", "surrogatepass")).hexdigest(), backing)
    """
)


@asynccontextmanager
async def sandboxes(tmp_path: Path, context: Any, count: int) -> AsyncIterator[list[SubprocessSandbox]]:
    prepared = validate_context(context)
    async with AsyncExitStack() as stack:
        started = []
        for index in range(count):
            scratch = tmp_path / f"run{index}"
            scratch.mkdir(parents=True)
            sandbox = SubprocessSandbox(cell_timeout=30.0)
            stack.push_async_callback(sandbox.aclose)
            await sandbox.start(SandboxSetup(prepared, echo_handler, scratch=scratch))
            started.append(sandbox)
        yield started


def inside(sandbox: SubprocessSandbox) -> str:
    """The context file's path as the worker sees it."""
    assert sandbox._launch is not None and sandbox._context_name is not None
    return f"{sandbox._launch.context_dir}/{sandbox._context_name}"


async def seen(sandbox: SubprocessSandbox) -> tuple[str, str, list[str]]:
    result = await sandbox.execute(SEEN, None)
    assert result.error is None, result.error
    kind, digest, backing = result.output.split(" ", 2)
    return kind, digest, json.loads(backing.strip().replace("'", '"'))


async def test_n_runs_over_one_context_write_one_file_that_every_worker_maps(tmp_path: Path) -> None:
    written = CONTEXTS.files_written
    async with sandboxes(tmp_path, TEXT, 3) as runs:
        assert CONTEXTS.files_written == written + 1
        (shared,) = [p for p in CONTEXTS.files() if p.name.startswith(DIGEST)]
        for run in runs:
            assert run._worker is not None
            linked = run._worker.context_dir / "context.txt"
            assert os.path.samefile(linked, shared)  # a hard link: one inode, one set of page-cache pages
            kind, digest, backing = await seen(run)
            assert (kind, digest) == ("str", DIGEST)
            assert len(backing) == 1 and backing[0] == inside(run)  # the text is the mapped file, not a copy
        assert shared.read_text() == TEXT
    assert not shared.exists()  # the last close gave the file back (the workers' links go with their folders)


async def test_a_run_can_neither_write_nor_replace_the_shared_file(tmp_path: Path) -> None:
    async with sandboxes(tmp_path, TEXT, 2) as (attacker, neighbour):
        attack = textwrap.dedent(
            f"""
            import mmap, os
            p = {inside(attacker)!r}
            d = os.path.dirname(p)

            def shared_writable_map():
                fd = os.open(p, os.O_RDONLY)
                mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)

            attempts = {{
                "write": lambda: open(p, "w"),
                "append": lambda: open(p, "a"),
                "update": lambda: open(p, "r+b"),
                "truncate": lambda: os.truncate(p, 0),
                "link into scratch": lambda: os.link(p, "linked"),
                "rename": lambda: os.rename(p, d + "/moved"),
                "remove": lambda: os.remove(p),
                "plant": lambda: open(d + "/context.json", "w"),
                "writable shared map": shared_writable_map,
            }}
            for name, attempt in attempts.items():
                try:
                    attempt()
                    print("ALLOWED", name)
                except (OSError, ValueError, PermissionError):
                    print("refused", name)
            """
        )
        result = await attacker.execute(attack, None)
        assert result.error is None and "ALLOWED" not in result.output and result.output.count("refused") == 9
        (shared,) = [p for p in CONTEXTS.files() if p.name.startswith(DIGEST)]
        assert hashlib.sha256(shared.read_bytes()).hexdigest() == DIGEST
        assert (await seen(neighbour))[1] == DIGEST


async def test_a_run_that_rewrites_its_context_in_memory_changes_only_its_own_copy(tmp_path: Path) -> None:
    """Model code may make its mapped pages writable and write them: the mapping is private (copy on write)."""
    async with sandboxes(tmp_path, TEXT, 2) as (mutator, neighbour):
        mutate = textwrap.dedent(
            """
            import ctypes, mmap, sys
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            start = id(context) + sys.getsizeof(context) - len(context) - 1
            page = start - start % mmap.PAGESIZE
            assert libc.mprotect(page, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE) == 0
            ctypes.memmove(start, b"XXXX", 4)
            print(context[:8])
            context = "rebound"
            """
        )
        result = await mutator.execute(mutate, None)
        assert result.error is None and result.output == "XXXX 000\n"
        after = await mutator.execute("print(context[:8])", None)  # the scaffold is put back: its own copy
        assert after.output == "XXXX 000\n"
        assert (await seen(neighbour))[1] == DIGEST
        (shared,) = [p for p in CONTEXTS.files() if p.name.startswith(DIGEST)]
        assert hashlib.sha256(shared.read_bytes()).hexdigest() == DIGEST
    async with sandboxes(tmp_path / "later", TEXT, 1) as (later,):  # a later run reads the file afresh
        assert (await seen(later))[1] == DIGEST


@pytest.mark.parametrize(
    "context", ["caf\u00e9 \U0001f600 \ud800 " * 1000, "ascii\r\nwith CRLF\r\n" * 1000], ids=["not-ascii", "crlf"]
)
async def test_every_text_reaches_every_run_byte_for_byte(tmp_path: Path, context: str) -> None:
    written = CONTEXTS.files_written
    async with sandboxes(tmp_path, context, 2) as runs:
        assert CONTEXTS.files_written == written + 1
        for run in runs:
            kind, digest, backing = await seen(run)
            assert (kind, digest) == ("str", hashlib.sha256(context.encode("utf-8", "surrogatepass")).hexdigest())
            assert (backing == [inside(run)]) is context.isascii()  # else decoded into the worker's own str


async def test_a_list_context_is_one_file_loaded_by_each_run(tmp_path: Path) -> None:
    documents = [{"id": i, "text": f"document {i}"} for i in range(100)]
    written = CONTEXTS.files_written
    async with sandboxes(tmp_path, documents, 2) as runs:
        assert CONTEXTS.files_written == written + 1
        for run in runs:
            result = await run.execute("print(len(context), context[7]['text'])", None)
            assert result.output == "100 document 7\n"
