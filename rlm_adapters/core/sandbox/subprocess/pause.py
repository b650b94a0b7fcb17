"""Stopping a subprocess sandbox between cells: nothing model code left behind runs while the host waits.

A cell may leave a thread or a forked child spinning (the per-cell CPU limit binds the cell, not what it
leaves): 15.9 CPU-seconds went by in 8 idle seconds of a persistent session. So once a cell's result is in,
every process of the sandbox gets SIGSTOP (the worker with all its threads, and everything it started), and
SIGCONT just before the next frame the host writes. The processes are those of the sandbox's cgroup when it
has one (nothing leaves it), else the launcher and its descendants: under bubblewrap and unshare a PID
namespace keeps even a double-forked daemon below the launcher. Signals are local system calls: stopping
costs microseconds per process, not a round trip.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from rlm_adapters.core.sandbox.subprocess.cgroups import SandboxCgroup

# A process forked while the others were being stopped is caught by the next round; a stopped one forks no more.
STOP_ROUNDS = 8


def _children() -> dict[int, list[int]]:
    """Every live process's children, from one pass over ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def sandbox_pids(root: int, cgroup: SandboxCgroup | None) -> set[int]:
    """The processes of the sandbox launched as `root`: its cgroup's, or `root` and its descendants."""
    if cgroup is not None:
        found = set(cgroup.pids())
        if found:
            return found
    tree = _children()
    found, todo = {root}, [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class SandboxPause:
    """Stops a sandbox's processes between cells and continues them for the next (`stop`, `resume`)."""

    def __init__(self) -> None:
        self.stopped: set[int] = set()

    def stop(self, root: int, cgroup: SandboxCgroup | None) -> None:
        """SIGSTOP every process of the sandbox, until a round finds none left running."""
        for _ in range(STOP_ROUNDS):
            fresh = sandbox_pids(root, cgroup) - self.stopped
            if not fresh:
                return
            for pid in fresh:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            self.stopped |= fresh

    def resume(self) -> None:
        """SIGCONT what `stop` stopped."""
        stopped, self.stopped = self.stopped, set()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)

    def forget(self) -> None:
        """The processes were killed (a restart or a close): nothing is left to continue."""
        self.stopped = set()
