"""The life of one worker process: start it with its folders and cgroup, hand it a context, stop it, clean up.

Starting a worker costs bubblewrap plus an interpreter (about 100-150 ms). A worker is generic until its
``init`` frame, so it can be started before any run needs it (see `spares`): each `Worker` gets, at spawn
time, a fresh scratch folder and a fresh, empty context folder (bound read-only under bubblewrap). A run that
takes it writes its context file into that folder on the host and sends ``init`` with the path the worker sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rlm_adapters.core.sandbox.limits import WorkerLimits
from rlm_adapters.core.sandbox.programs import WORKER_FOLDER
from rlm_adapters.core.sandbox.subprocess.cgroups import SandboxCgroup, stale_groups
from rlm_adapters.core.sandbox.subprocess.isolation import SHM_BYTES, IsolationLevel, Launch, Reach, build_launch
from rlm_adapters.core.sandbox.tempdirs import gone, new_folder, remove_folder


@dataclass(frozen=True)
class SpareKey:
    """Everything that shapes a worker's launch and limits: a spare serves only runs with the same key.

    The wall time and the output cap are not in it: the host enforces the one, the ``init`` frame gives the other.
    """

    python: str
    reach: Reach
    memory_bytes: int | None
    cpu_seconds: float | None
    processes: int | None
    file_size_bytes: int | None

    @classmethod
    def of(cls, python: str, reach: Reach, limits: WorkerLimits) -> SpareKey:
        """The key of workers for `python` at `reach` under `limits`."""
        return cls(python, reach, limits.memory_bytes, limits.cpu_seconds, limits.processes, limits.file_size_bytes)

    @property
    def level(self) -> IsolationLevel:
        """The launcher level."""
        return self.reach.level

    def tmpfs_sizes(self) -> tuple[int | None, int | None]:
        """Bytes of the scratch and ``/dev/shm`` tmpfs mounts: the file-size limit caps all files together."""
        scratch = self.file_size_bytes
        shm = SHM_BYTES if scratch is None else min(SHM_BYTES, scratch)
        return scratch, shm


@dataclass
class Worker:
    """A started worker process with its own folders and cgroup, owned by one run once taken.

    Attributes:
        popen: The launched process (bubblewrap, unshare, or the interpreter itself).
        launch: How it was launched (used again for a restart, with the same folders).
        root: The host folder holding `scratch` and `context_dir`, removed with the worker.
        scratch: The worker's writable folder (host path).
        context_dir: The folder the run's context file is written into (host path; read-only inside).
        cgroup: The cgroups (pids, memory) the worker runs in, if any could be created.
        key: The launch shape.
    """

    popen: subprocess.Popen[bytes]
    launch: Launch
    root: Path
    scratch: Path
    context_dir: Path
    cgroup: SandboxCgroup | None
    key: SpareKey


def spawn(launch: Launch, cgroup: SandboxCgroup | None) -> subprocess.Popen[bytes]:
    """Start `launch` (inside `cgroup` when given) with pipes on stdin, stdout and stderr.

    Every level asks the kernel to SIGKILL the launch when the thread that started it ends, the host killed
    outright included: bubblewrap's ``--die-with-parent``, ``setpriv --pdeathsig`` before ``unshare`` (whose
    ``--kill-child`` then takes the PID namespace down), the walls' own request in a ``process``-level worker
    (`isolation.build_launch`). That is why spares are started from one long-lived thread.

    Raises:
        OSError: The command could not be started.
    """
    argv = cgroup.wrap(launch.argv) if cgroup is not None else launch.argv
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=launch.cwd,
        env=launch.env,
        start_new_session=True,  # its own process group, so a kill takes its children too
    )


def new_worker(key: SpareKey) -> Worker:
    """Create the folders and the cgroup and start a worker for `key` (blocking for a fork + exec only).

    Raises:
        OSError: The folders or the process could not be created (nothing is left behind).
    """
    root = new_folder("worker")
    scratch, context_dir = root / "scratch", root / "context"
    cgroup: SandboxCgroup | None = None
    try:
        scratch.mkdir(mode=0o700)
        context_dir.mkdir(mode=0o700)
        if sys.platform.startswith("linux"):
            cgroup = SandboxCgroup.create(key.processes, key.memory_bytes)
        launch = build_launch(key.reach, key.python, WORKER_FOLDER, scratch, context_dir, key.tmpfs_sizes())
        popen = spawn(launch, cgroup)
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        remove_folder(root)
        raise
    return Worker(popen, launch, root, scratch, context_dir, cgroup, key)


def place_context(context_file: Path, worker: Worker) -> str:
    """Put the run's context file into the worker's context folder; returns its name there.

    The name is ``context.txt`` or ``context.json`` whatever the file's own (a shared file is named by its
    hash). A hard link when the file system allows it (no copy of a large context), else a copy. The file and
    the folder are then made read-only by mode as well (the bind mount, and Landlock below it, are what
    hold). Nothing at the target is ever followed: a name planted there (a symlink into the host's files)
    makes the hand-over fail instead of writing the context where an attacker chose.
    """
    target = worker.context_dir / f"context{context_file.suffix}"
    try:
        os.link(context_file, target)  # never follows a planted name: EEXIST
    except FileExistsError:
        raise
    except OSError:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with open(fd, "wb") as out, open(context_file, "rb") as source:
            shutil.copyfileobj(source, out, 1024**2)
    with contextlib.suppress(OSError):
        target.chmod(0o444)
        worker.context_dir.chmod(0o555)
    return target.name


def kill_now(popen: subprocess.Popen[bytes], group: bool = True) -> None:
    """SIGKILL the process group (unless `group` is False) and the process, without waiting."""
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        popen.kill()


async def wait_exit(popen: subprocess.Popen[bytes], timeout: float | None = None) -> int | None:
    """The exit code once the process ended (polled, so it works in any event loop); None on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    delay = 0.001
    while (code := popen.poll()) is None:
        if deadline is not None and time.monotonic() >= deadline:
            return None
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.02)
    return code


def dispose(worker: Worker) -> None:
    """Kill a worker that no run owns, reap it, and remove its cgroup and folders (blocking)."""
    # A process reaped already may have had its pid reused: only signal a group that surely is its own.
    kill_now(worker.popen, group=worker.popen.returncode is None)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.popen.wait(5.0)
    for stream in (worker.popen.stdin, worker.popen.stdout, worker.popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    if worker.cgroup is not None:
        worker.cgroup.end()
    remove_folder(worker.root)


def sweep_stale_groups() -> None:
    """Kill what is left in the cgroups of a process that was killed (no exit handler ran), then remove them.

    The owner's pid is in each group's name; a group whose owner is gone may still hold model code that outlived
    it (a worker that cleared its parent-death signal, a child that left its process group): it is killed first,
    since nothing else ever will be. The folders a killed process left are swept by `tempdirs.sweep`.
    """
    owned = re.compile(r"rlm-(\d+)-")
    for path in stale_groups():
        match = owned.match(path.name)
        if match is None or not gone(int(match.group(1))):
            continue
        SandboxCgroup([path], ()).end()
