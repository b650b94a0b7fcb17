"""Helpers of the sandbox tests: start a subprocess sandbox, find its worker, count the processes left."""

from __future__ import annotations

import asyncio
import gc
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
    """The longest single step of the running event loop (``async with StallProbe() as probe``): the longest
    time nothing else could run on it, in seconds (`longest`), and the most CPU one step used (`longest_cpu`).

    `check` bounds both. On a busy shared machine a step's wall time stretches with the load (a 0.2 s step
    took 0.84 s at a load of 8 on 2 cores) while its CPU time does not, so CPU-heavy work on the loop is
    bounded tightly by CPU time, and a blocking wait (which uses no CPU) by a looser bound on wall time.

    Every callback the loop runs (each step of each task) is timed while the probe is open; steps of other
    threads' loops (a fake server's) are not counted. What the test process held before the probe opened is
    frozen out of the garbage collector (`gc.freeze`): late in a full run, a collection of the earlier
    tests' heap would be counted against whichever step it fell in. Collections of what the code under test
    makes still count.
    """

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_cpu = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._real_run: Any = None

    async def __aenter__(self) -> StallProbe:
        self._loop = loop = asyncio.get_running_loop()
        gc.collect()
        gc.freeze()
        self._real_run = real_run = asyncio.events.Handle._run
        probe = self

        def timed_run(handle: asyncio.Handle) -> None:
            if handle._loop is not loop:  # type: ignore[attr-defined]
                return real_run(handle)  # type: ignore[no-any-return]
            started, started_cpu = time.perf_counter(), time.thread_time()
            try:
                return real_run(handle)  # type: ignore[no-any-return]
            finally:
                probe.longest = max(probe.longest, time.perf_counter() - started)
                probe.longest_cpu = max(probe.longest_cpu, time.thread_time() - started_cpu)

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        asyncio.events.Handle._run = self._real_run  # type: ignore[method-assign]
        gc.unfreeze()

    def check(self, *, cpu: float = 0.5, wall: float = 2.0) -> None:
        """Fail when one step of the loop used more than `cpu` CPU-seconds or held it `wall` seconds."""
        assert self.longest_cpu < cpu and self.longest < wall, (
            f"the host's loop stalled {self.longest:.2f} s ({self.longest_cpu:.2f} CPU-seconds in one step)"
        )
