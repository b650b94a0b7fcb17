"""One cgroup per sandbox: processes + threads (``pids``) and memory (``memory``) counted for the whole sandbox.

RLIMIT_AS binds each process alone (four children of 400 MB pass a 512 MiB limit) and RLIMIT_NPROC
does not bind root; a cgroup counts everything the sandbox starts, tmpfs pages included. Groups are
made under this process's own cgroup of each controller (so outer limits still apply), with cgroup
v1 (one hierarchy per controller) or v2 (one unified group, where the controllers are delegated).
A controller that cannot be written here is simply absent: `SandboxCgroup.controllers` says which
hold, and the sandbox reports the rest as per-process limits. The sandbox never writes here itself:
the walls (Landlock, no ``/sys`` inside bubblewrap) keep model code from leaving its group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PIDS_ROOT = CGROUP_ROOT / "pids"
CONTROLLERS = ("pids", "memory")


@dataclass(frozen=True)
class Mount:
    """Where a controller's hierarchy is mounted and this process's group in it."""

    root: Path
    own: Path
    version: int


def writable_mounts() -> dict[str, Mount]:
    """The writable hierarchy of each controller in `CONTROLLERS` for this process (v1 first, else v2)."""
    try:
        own = Path("/proc/self/cgroup").read_text()
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return {}
    return {name: m for name, m in parse_mounts(own, mounts).items() if os.access(m.own, os.W_OK)}


def parse_mounts(proc_cgroup: str, proc_mounts: str) -> dict[str, Mount]:
    """Each controller's hierarchy and this process's group in it, from ``/proc/self/{cgroup,mounts}``.

    A v2 controller counts only where it is enabled for children of this process's group (listed in
    its ``cgroup.subtree_control``), since only then does a child group get the controller's files.
    """
    own: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, names, path = line.split(":", 2)
        for name in names.split(",") if names else ["<v2>"]:
            own[name] = path
    found: dict[str, Mount] = {}
    unified: Path | None = None
    for line in proc_mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup2":
            unified = Path(fields[1])
        elif fields[2] == "cgroup":
            for name in CONTROLLERS:
                if name in fields[3].split(",") and name in own:
                    found[name] = Mount(Path(fields[1]), Path(fields[1]) / own[name].lstrip("/"), 1)
    if unified is not None and "<v2>" in own:
        base = unified / own["<v2>"].lstrip("/")
        with contextlib.suppress(OSError):
            enabled = (base / "cgroup.subtree_control").read_text().split()
            for name in CONTROLLERS:
                if name not in found and name in enabled:
                    found[name] = Mount(unified, base, 2)
    return found


class SandboxCgroup:
    """The groups (one per v1 hierarchy, or one v2 group) that one sandbox's processes run in."""

    def __init__(self, paths: list[Path], controllers: tuple[str, ...]) -> None:
        self.paths = paths
        self.controllers = controllers

    @classmethod
    def create(cls, processes: int | None, memory_bytes: int | None) -> SandboxCgroup | None:
        """New groups capping `processes` and `memory_bytes`; None when no controller is writable."""
        limits = {"pids": processes, "memory": memory_bytes}
        # The owner's pid in the name lets a later process remove the group if its owner was killed.
        name = f"rlm-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        paths: dict[Path, list[str]] = {}
        for controller, mount in writable_mounts().items():
            # Moving a process needs write access to cgroup.procs of the common ancestor (v2 delegation).
            joinable = mount.version == 1 or os.access(mount.own / "cgroup.procs", os.W_OK)
            if limits[controller] is not None and joinable:
                paths.setdefault(mount.own / name, []).append(controller)
        made: list[Path] = []
        held: list[str] = []
        for path, controllers in paths.items():
            try:
                path.mkdir()
            except OSError:
                continue
            made.append(path)
            if not os.access(path / "cgroup.procs", os.W_OK):
                continue
            for controller in controllers:
                if _set_limit(path, controller, limits[controller]):
                    held.append(controller)
        # Only groups holding a limit are joined: a group the launch cannot enter would stop the worker.
        group = cls([p for p in made if any(c in held for c in paths[p])], tuple(sorted(held)))
        for unused in set(made) - set(group.paths):
            with contextlib.suppress(OSError):
                unused.rmdir()
        if not held:
            group.remove()
            return None
        return group

    def wrap(self, argv: list[str]) -> list[str]:
        """Prefix `argv` so the process joins every group before it execs (no fork can escape them)."""
        joins = " && ".join(f'echo $$ > "{path / "cgroup.procs"}"' for path in self.paths)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "rlm-sandbox", *argv]

    def pids(self) -> list[int]:
        """Every process in the groups."""
        found: set[int] = set()
        for path in self.paths:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        return sorted(found)

    def kill_all(self) -> None:
        """SIGKILL every process still in the groups."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def end(self, tries: int = 100) -> bool:
        """SIGKILL every process in the groups and delete them, retrying while the kernel reaps them.

        Returns False if processes still remain after `tries` rounds.
        """
        for _ in range(tries):
            self.kill_all()
            if self.remove():
                return True
            time.sleep(0.01)
        return False

    def remove(self) -> bool:
        """Delete the groups once they are empty; False if processes remain."""
        done = True
        for path in self.paths:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _set_limit(path: Path, controller: str, value: int | None) -> bool:
    if value is None:
        return False
    files = {
        "pids": ["pids.max"],
        # v1: RAM, then RAM + swap (so swap cannot extend it); v2: RAM, and no swap at all.
        "memory": ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max", "memory.swap.max"],
    }[controller]
    wrote = False
    for file in files:
        target = path / file
        if not target.exists():
            continue
        try:
            target.write_text("0" if file == "memory.swap.max" else str(value))
            wrote = wrote or file != "memory.swap.max"
        except OSError:
            if file in ("memory.memsw.limit_in_bytes", "memory.swap.max"):
                continue  # no swap accounting here: RAM alone is limited
            return False
    return wrote


def stale_groups() -> list[Path]:
    """Every ``rlm-*`` group under this process's own groups (for the sweep of a killed owner's leftovers)."""
    found: list[Path] = []
    for mount in writable_mounts().values():
        with contextlib.suppress(OSError):
            found += [p for p in mount.own.glob("rlm-*") if p.is_dir()]
    return sorted(set(found))
