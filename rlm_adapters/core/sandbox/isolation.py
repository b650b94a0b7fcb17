"""How the ``subprocess`` sandbox launches its worker: bubblewrap, ``unshare`` or a plain process.

`detect_level` probes, once per interpreter, which boundary this machine can actually build, by
starting a real (tiny) sandboxed Python: a tool that is installed but refused by the kernel (no user
namespaces, no privileges) must never be reported as reached. `build_launch` turns a level into the
command line and the paths the worker sees, and `PidsCgroup` caps processes and threads where a
cgroup v1 ``pids`` controller is writable (RLIMIT_NPROC does not bind root, whose processes it
exempts, and counts every process of the user rather than the sandbox's own).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

IsolationLevel = Literal["bwrap", "unshare", "process"]
IsolationRequest = Literal["auto", "bwrap", "unshare", "process"]

# Paths the worker sees inside a bubblewrap sandbox.
INSIDE_SCRATCH = "/scratch"
INSIDE_WORKER = "/opt/rlm/worker.py"
INSIDE_CONTEXT = "/opt/rlm/context"  # the context folder, bound read-only
PROBE_TIMEOUT = 10.0
CGROUP_PIDS_ROOT = Path("/sys/fs/cgroup/pids")

DESCRIPTIONS: dict[IsolationLevel, str] = {
    "bwrap": "bubblewrap: new user, network, mount, PID, IPC and UTS namespaces; read-only runtime, "
    "writable scratch only, no host files, no network (loopback included), no host environment",
    "unshare": "unshare: new user, network, PID, IPC and UTS namespaces (no network, loopback included); "
    "the host's file system stays visible with the host user's rights; no host environment",
    "process": "process only: a separate process with no host environment and resource limits; it can "
    "read what the host user can read and reach the network (no namespaces on this system)",
}

# What keeps model code from altering the context file (read again after every restart), per level.
CONTEXT_PROTECTION: dict[IsolationLevel, str] = {
    "bwrap": "context file in a read-only bind mount (model code cannot alter, delete or replace it)",
    "unshare": "context file write-protected by its mode only (0444 in a 0555 folder): the worker runs as "
    "the host user, who may change the mode, so model code could alter it",
    "process": "context file write-protected by its mode only (0444 in a 0555 folder): the worker runs as "
    "the host user, who may change the mode, so model code could alter it",
}


@dataclass(frozen=True)
class Launch:
    """A ready-to-run worker command.

    Attributes:
        argv: The command line.
        level: The isolation level this command builds.
        context_dir: The context folder's path as the worker sees it (the context file is written there
            when a run takes the worker; the worker reads it from its ``init`` frame).
        cwd: The working folder of the launched process (on the host).
    """

    argv: list[str]
    level: IsolationLevel
    context_dir: str | None
    cwd: str
    env: dict[str, str] = field(default_factory=dict)


def python_roots(python: str) -> list[str]:
    """Folders an interpreter needs read-only: its installation prefix(es), outside ``/usr``."""
    real = Path(python).resolve()
    roots = {str(real.parent.parent)}
    if python == sys.executable:
        roots.update({sys.prefix, sys.base_prefix})
    return sorted(r for r in roots if not r.startswith("/usr/") and r != "/usr" and os.path.isdir(r))


def _system_binds() -> list[str]:
    # Merged-/usr systems have /lib, /bin as symlinks into /usr: recreate the links, else bind the folders.
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("lib", "lib64", "lib32", "bin", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    return args


def bwrap_argv(python: str, worker: Path, scratch: Path, context_dir: Path | None, env: dict[str, str]) -> list[str]:
    """The bubblewrap command line that runs `worker` with `python` inside a fresh sandbox."""
    bwrap = shutil.which("bwrap") or "bwrap"
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--uid", "65534", "--gid", "65534", "--hostname", "rlm-sandbox", *_system_binds()]
    for root in python_roots(python):
        argv += ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", str(worker), INSIDE_WORKER]
    argv += ["--bind", str(scratch), INSIDE_SCRATCH]
    if context_dir is not None:
        # A folder bound read-only (empty at launch, the context file is written into it on the host later):
        # the model can neither alter, delete nor replace its input, even across a restart.
        argv += ["--ro-bind", str(context_dir), INSIDE_CONTEXT]
    argv += ["--chdir", INSIDE_SCRATCH, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, str(Path(python).resolve()), "-I", "-S", INSIDE_WORKER]


def unshare_prefix() -> list[str]:
    """The ``unshare`` command prefix (needs util-linux and user namespaces)."""
    unshare = shutil.which("unshare") or "unshare"
    return [unshare, "--user", "--map-root-user", "--net", "--pid", "--ipc", "--uts", "--mount",
            "--mount-proc", "--fork", "--kill-child"]  # fmt: skip


def sandbox_env(home: str) -> dict[str, str]:
    """The worker's whole environment: nothing of the host's (API keys must never reach model code)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def build_launch(level: IsolationLevel, python: str, worker: Path, scratch: Path, context_dir: Path | None) -> Launch:
    """The command that starts the worker at `level`, with the paths it will see.

    The launch does not depend on any run: `scratch` and `context_dir` are fresh folders of their own, so
    a worker can be started ahead of time and given its run (context file, tools, limits) on ``init``.
    """
    if level == "bwrap":
        env = sandbox_env(INSIDE_SCRATCH)
        argv = bwrap_argv(python, worker, scratch, context_dir, env)
        return Launch(argv, level, INSIDE_CONTEXT if context_dir else None, str(scratch), {})
    env = sandbox_env(str(scratch))
    argv = [python, "-I", "-S", str(worker)]
    if level == "unshare":
        argv = [*unshare_prefix(), *argv]
    return Launch(argv, level, str(context_dir) if context_dir else None, str(scratch), env)


def _probe(level: IsolationLevel, python: str) -> bool:
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    launch = build_launch(level, python, Path(__file__).resolve(), scratch, None)
    # Run the interpreter itself (not the worker): it must start, and find no network to reach.
    code = "import socket,sys\ntry: socket.create_connection(('127.0.0.1', 9), 1)\nexcept OSError: sys.exit(0)\n"
    argv = [*launch.argv[:-1], "-c", code]
    try:
        done = subprocess.run(
            argv, env=launch.env, cwd=launch.cwd, capture_output=True, timeout=PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def level_available(level: IsolationLevel, python: str) -> bool:
    """True when `level` really works here (probed once per interpreter and level)."""
    if level == "process":
        return True
    if not sys.platform.startswith("linux"):
        return False
    tool = "bwrap" if level == "bwrap" else "unshare"
    return shutil.which(tool) is not None and _probe(level, python)


def detect_level(request: IsolationRequest, python: str) -> IsolationLevel:
    """The level to use for `request`: the strongest that works for ``auto``, else exactly the one asked.

    Raises:
        RuntimeError: A specific level was asked for and cannot be built here.
    """
    if request == "auto":
        candidates: tuple[IsolationLevel, ...] = ("bwrap", "unshare")
        for level in candidates:
            if level_available(level, python):
                return level
        return "process"
    if not level_available(request, python):
        raise RuntimeError(
            f"isolation={request!r} is not available on this system (tool missing, or the kernel refuses "
            "user namespaces); install bubblewrap, or pass isolation='auto' to accept the strongest level "
            "that works (it is reported in the result's metadata)"
        )
    return request


class PidsCgroup:
    """A cgroup v1 ``pids`` group that caps the worker's processes + threads and can kill them all."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        """A new group with `limit` pids, or None where no writable pids controller exists."""
        if not CGROUP_PIDS_ROOT.is_dir() or not os.access(CGROUP_PIDS_ROOT, os.W_OK):
            return None
        # The owner's pid in the name lets a later process remove the group if its owner was killed.
        path = CGROUP_PIDS_ROOT / f"rlm-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def wrap(self, argv: list[str]) -> list[str]:
        """Prefix `argv` so the process joins the group before it execs (no fork can escape it)."""
        procs = self.path / "cgroup.procs"
        return ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "rlm-sandbox", *argv]

    def pids(self) -> list[int]:
        """Every process in the group."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self) -> None:
        """SIGKILL every process still in the group."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Delete the group once it is empty; False if processes remain."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True
