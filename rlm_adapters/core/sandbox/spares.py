"""Spare workers: one pre-started worker per launch shape, so that a new run level starts at once.

Starting a worker costs bubblewrap plus an interpreter (about 100-150 ms). A worker is generic until its
``init`` frame, so it can be started before any run needs it: each `Worker` gets, at spawn time, a fresh
scratch folder and a fresh, empty context folder (bound read-only under bubblewrap). A run that takes it
writes its context file into that folder on the host and sends ``init`` with the path the worker sees.

`SparePool` keeps at most one idle worker per `SpareKey` (everything that shapes the launch or the limits),
refills it in the background after a take, hands each worker to one run only, and kills the idle ones
when the process exits. Spares are started from one long-lived thread: bubblewrap's ``--die-with-parent``
follows the thread that started it, which must therefore outlive the worker.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rlm_adapters.core.sandbox import worker as worker_module
from rlm_adapters.core.sandbox.cgroups import SandboxCgroup, stale_groups
from rlm_adapters.core.sandbox.isolation import SHM_BYTES, IsolationLevel, Launch, Reach, build_launch

logger = logging.getLogger("rlm_adapters.sandbox")

WORKER_PATH = Path(worker_module.__file__).resolve()
CGROUP_REMOVE_TRIES = 100


@dataclass(frozen=True)
class SpareKey:
    """Everything that shapes a worker's launch and limits: a spare serves only runs with the same key."""

    python: str
    reach: Reach
    memory_bytes: int | None
    cpu_seconds: float | None
    processes: int | None
    file_size_bytes: int | None

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
    root = Path(tempfile.mkdtemp(prefix=f"rlm-worker-{os.getpid()}-"))
    scratch, context_dir = root / "scratch", root / "context"
    cgroup: SandboxCgroup | None = None
    try:
        scratch.mkdir(mode=0o700)
        context_dir.mkdir(mode=0o700)
        if sys.platform.startswith("linux"):
            cgroup = SandboxCgroup.create(key.processes, key.memory_bytes)
        launch = build_launch(key.reach, key.python, WORKER_PATH, scratch, context_dir, key.tmpfs_sizes())
        popen = spawn(launch, cgroup)
    except BaseException:
        if cgroup is not None:
            cgroup.remove()
        remove_folder(root)
        raise
    return Worker(popen, launch, root, scratch, context_dir, cgroup, key)


def place_context(context_file: Path, worker: Worker) -> str:
    """Put the run's context file into the worker's context folder; returns its name there.

    A hard link when the file system allows it (no copy of a large context), else a copy. The file and
    the folder are then made read-only by mode as well (the bind mount, and Landlock below it, are what
    hold). Nothing at the target is ever followed: a name planted there (a symlink into the host's files)
    makes the hand-over fail instead of writing the context where an attacker chose.
    """
    target = worker.context_dir / context_file.name
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
    return context_file.name


def remove_folder(root: Path) -> None:
    """Remove a worker's folders (restoring write rights the context folder lost)."""
    with contextlib.suppress(OSError):
        (root / "context").chmod(0o755)
    shutil.rmtree(root, ignore_errors=True)


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
        for _ in range(CGROUP_REMOVE_TRIES):
            worker.cgroup.kill_all()
            if worker.cgroup.remove():
                break
            time.sleep(0.01)
    remove_folder(worker.root)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, under another user
        return False
    return False


def sweep_stale() -> None:
    """Remove the folders and empty cgroups left by a process that was killed (no exit handler ran)."""
    owned = re.compile(r"rlm-(?:worker-)?(\d+)-")
    folders = list(Path(tempfile.gettempdir()).glob("rlm-worker-*"))
    groups = stale_groups()
    for path in [*folders, *groups]:
        match = owned.match(path.name)
        if match is None or not _gone(int(match.group(1))):
            continue
        if path in groups:
            SandboxCgroup([path], ()).remove()  # only once empty
        else:
            remove_folder(path)


def _untouched(worker: Worker) -> bool:
    """The spare's context folder is still empty: nothing (a symlink planted by other model code) waits there."""
    try:
        return not os.listdir(worker.context_dir)
    except OSError:
        return False


class SparePool:
    """At most one idle worker per `SpareKey`, refilled in the background after each take."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._idle: dict[SpareKey, Worker] = {}
        self._owned: dict[int, Worker] = {}  # workers runs hold, by id: disposed of at exit if still there
        self._pending: set[SpareKey] = set()
        self._queue: queue.SimpleQueue[SpareKey] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.taken = 0
        self.spawned = 0

    def take(self, key: SpareKey) -> Worker | None:
        """The idle worker for `key`, now owned by the caller; None when there is none (or it died).

        The caller hands it back with `release` once it has killed it and removed its folders.
        """
        with self._lock:
            worker = self._idle.pop(key, None)
        if worker is None:
            return None
        if worker.popen.poll() is not None:  # died while idle (e.g. killed from outside): start afresh
            dispose(worker)
            return None
        if not _untouched(worker):
            logger.warning("a spare sandbox worker's context folder was tampered with; it was discarded")
            dispose(worker)
            return None
        with self._lock:
            self.taken += 1
            self._owned[id(worker)] = worker
        return worker

    def own(self, worker: Worker) -> None:
        """Track a worker a run started itself, so that it is disposed of at exit if never released."""
        with self._lock:
            self._owned[id(worker)] = worker

    def release(self, worker: Worker) -> None:
        """The run that held `worker` has closed it."""
        with self._lock:
            self._owned.pop(id(worker), None)

    def replenish(self, key: SpareKey) -> None:
        """Start a spare for `key` in the background, unless one is idle or being started."""
        with self._lock:
            if self._closed or key in self._idle or key in self._pending:
                return
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="rlm-spare-workers", daemon=True)
                self._thread.start()
        self._queue.put(key)

    def _serve(self) -> None:
        try:
            sweep_stale()
        except OSError as exc:
            logger.debug("could not sweep stale sandbox folders: %s", exc)
        while True:
            key = self._queue.get()
            worker: Worker | None = None
            try:
                worker = new_worker(key)
            except Exception as exc:  # the run that needs it will start its own and report any error
                logger.debug("could not start a spare sandbox worker: %s", exc)
            stale: Worker | None = None
            with self._lock:
                self._pending.discard(key)
                if worker is not None:
                    self.spawned += 1
                    if self._closed or key in self._idle:
                        stale = worker
                    else:
                        self._idle[key] = worker
                self._lock.notify_all()
            if stale is not None:
                dispose(stale)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no spare is being started; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def pids(self) -> set[int]:
        """The host pids of the idle spares (the launched process of each)."""
        with self._lock:
            return {w.popen.pid for w in self._idle.values()}

    def cgroup_paths(self) -> set[Path]:
        """The cgroup folders of the idle spares."""
        with self._lock:
            return {path for w in self._idle.values() if w.cgroup is not None for path in w.cgroup.paths}

    def spare_pid(self, key: SpareKey) -> int | None:
        """The host pid of the idle spare for `key`, if there is one."""
        with self._lock:
            worker = self._idle.get(key)
            return None if worker is None else worker.popen.pid

    def keys(self) -> set[SpareKey]:
        """The keys with an idle spare."""
        with self._lock:
            return set(self._idle)

    def clear(self) -> None:
        """Kill every idle spare (the pool stays usable)."""
        self.wait_idle()
        with self._lock:
            workers = list(self._idle.values())
            self._idle.clear()
        for worker in workers:
            dispose(worker)

    def close(self) -> None:
        """Kill every idle spare and start no more (run at interpreter exit)."""
        with self._lock:
            self._closed = True
        self.wait_idle(5.0)  # a spare being started is disposed of as soon as it exists
        with self._lock:
            # Idle spares, and workers whose run never finished closing them (e.g. its event loop was
            # closed while the close was still running).
            workers = [*self._idle.values(), *self._owned.values()]
            self._idle.clear()
            self._owned.clear()
        for worker in workers:
            dispose(worker)


POOL = SparePool()
atexit.register(POOL.close)
