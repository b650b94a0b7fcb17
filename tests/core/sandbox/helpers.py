"""Helpers of the sandbox tests: start a subprocess sandbox, find its worker, count the processes left."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import CallHandler, SandboxSetup
from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox
from rlm_adapters.core.sandbox.subprocess.spares import POOL


def spare_pids() -> set[int]:
    """The idle spare workers kept on purpose for the next run (see `spares`), once none is being started."""
    POOL.wait_idle()
    return POOL.pids()


def descendants(root: int | None = None) -> list[int]:
    """Every live (non-zombie) process below `root` (default: this test process), idle spare workers aside."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root or os.getpid()]
    spares = spare_pids()
    while todo:
        children = [c for c in parents.get(todo.pop(), []) if c not in spares]
        found += children
        todo += children
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie or a vanished process counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class ProcessWatch:
    """The processes below this test process that were not there when the watch was made."""

    def __init__(self) -> None:
        self.before = set(descendants())

    def new(self) -> set[int]:
        """New live processes, once the closes handed to the reaper are done."""
        assert REAPER.flush()
        return set(descendants()) - self.before


def worker_pid(sandbox: SubprocessSandbox) -> int:
    """The host pid of the Python running the worker (below bubblewrap / unshare, if any)."""
    assert sandbox.worker_pid is not None
    candidates = [sandbox.worker_pid, *descendants(sandbox.worker_pid)]
    pythons = [p for p in candidates if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[1:2] == [b"-I"]]
    return pythons[-1]


async def echo_handler(kind: str, args: dict[str, Any]) -> str:
    return f"answer to {args.get('prompt')}"


async def start(tmp_path: Path, handler: CallHandler = echo_handler, **options: Any) -> SubprocessSandbox:
    """A started subprocess sandbox over a small text context."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    sandbox = SubprocessSandbox(**options)
    await sandbox.start(SandboxSetup(validate_context("hello context"), handler, scratch=scratch))
    return sandbox


class StallProbe:
    """The longest time the running event loop went without running a task (``async with StallProbe() as p``).

    A task wakes every `tick` seconds; any gap past that is time the loop spent stuck in one step.
    """

    def __init__(self, tick: float = 0.01) -> None:
        self.tick = tick
        self.longest = 0.0
        self._last = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    def _note(self) -> None:
        now = time.monotonic()
        self.longest = max(self.longest, now - self._last - self.tick)
        self._last = now

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            self._note()

    async def __aenter__(self) -> StallProbe:
        self._last = time.monotonic()
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        self._note()  # a stall that lasted until now counts too
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
