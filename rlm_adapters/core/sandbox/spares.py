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
    """Idle warm workers per `SpareKey`, as many as recent demand asked for, refilled in the background.

    Demand is the peak number of workers of a key that runs held at once (taken spares and workers runs
    started themselves after a miss) since the key was last quiet: a burst of N nested children leaves N
    spares for the next burst. It is capped by `max_per_key`, and in practice by the run tree's
    ``max_sandboxes``, which bounds how many workers runs hold at once. While runs hold workers, only the
    rest of the demand is kept idle (at least one): spares are refilled as runs release their workers, so
    a key's workers, held and idle, stay within its demand plus one and refills do not compete with a
    running burst for the CPU. After `quiet_period` seconds without a take of a key, its demand falls
    back to one and the idle extras are killed.

    Args:
        max_per_key: The most idle workers kept for one key.
        quiet_period: Seconds without a take after which a key's idle extras (beyond one) are killed.
    """

    def __init__(self, max_per_key: int = 32, quiet_period: float = 20.0) -> None:
        if max_per_key < 1:
            raise ValueError(f"max_per_key must be at least 1, got {max_per_key!r}")
        if quiet_period <= 0:
            raise ValueError(f"quiet_period must be a positive number of seconds, got {quiet_period!r}")
        self.max_per_key = max_per_key
        self.quiet_period = quiet_period
        self._lock = threading.Condition()
        self._idle: dict[SpareKey, list[Worker]] = {}
        self._owned: dict[int, Worker] = {}  # workers runs hold, by id: disposed of at exit if still there
        self._held: dict[SpareKey, int] = {}  # workers of each key that runs hold now
        self._demand: dict[SpareKey, int] = {}  # peak of `_held` since the key was last quiet
        self._last_take: dict[SpareKey, float] = {}
        self._pending: dict[SpareKey, int] = {}  # spares queued or being started
        self._queue: queue.SimpleQueue[SpareKey | None] = queue.SimpleQueue()  # None: look for quiet keys
        self._thread: threading.Thread | None = None
        self._closed = False
        self.taken = 0
        self.spawned = 0
        self.trimmed = 0
        self._trimming = 0  # idle extras being killed

    def take(self, key: SpareKey) -> Worker | None:
        """An idle worker for `key`, now owned by the caller; None when there is none (or it died).

        The caller hands it back with `release` once it has killed it and removed its folders.
        """
        while True:
            with self._lock:
                workers = self._idle.get(key)
                worker = workers.pop(0) if workers else None  # the oldest: the likeliest to be ready
            if worker is None:
                return None
            if worker.popen.poll() is not None:  # died while idle (e.g. killed from outside): try the next
                dispose(worker)
                continue
            if not _untouched(worker):
                logger.warning("a spare sandbox worker's context folder was tampered with; it was discarded")
                dispose(worker)
                continue
            with self._lock:
                self.taken += 1
                self._hold(worker)
            return worker

    def own(self, worker: Worker) -> None:
        """Track a worker a run started itself, so that it is disposed of at exit if never released."""
        with self._lock:
            self._hold(worker)

    def _hold(self, worker: Worker) -> None:
        """Count a worker a run now holds towards its key's demand (the lock is held)."""
        key = worker.key
        self._owned[id(worker)] = worker
        held = self._held[key] = self._held.get(key, 0) + 1
        self._demand[key] = min(self.max_per_key, max(self._demand.get(key, 1), held))
        self._last_take[key] = time.monotonic()

    def release(self, worker: Worker) -> None:
        """The run that held `worker` has closed it: its place in the key's demand is refilled."""
        with self._lock:
            if self._owned.pop(id(worker), None) is None or self._held.get(worker.key, 0) <= 0:
                return
            self._held[worker.key] -= 1
            refill = len(self._idle.get(worker.key, ())) > 0 or worker.key in self._pending
        if refill:  # only keys whose spares did start (a key that fails to start is never retried here)
            self.replenish(worker.key)

    def _target(self, key: SpareKey) -> int:
        """Idle workers to keep for `key` now (the lock is held): its demand less what runs hold, at least one.

        Spares are not started while a burst holds workers (they would compete with it for the CPU), and
        the workers of a key never exceed its demand by more than one.
        """
        return max(1, self._demand.get(key, 1) - self._held.get(key, 0))

    def wanted(self, key: SpareKey) -> int:
        """How many idle workers the pool keeps for `key` now (its recent demand, at least one)."""
        with self._lock:
            return self._demand.get(key, 1)

    def replenish(self, key: SpareKey) -> None:
        """Start spares for `key` in the background, up to its demand (idle and being started counted)."""
        with self._lock:
            if self._closed:
                return
            missing = self._target(key) - len(self._idle.get(key, ())) - self._pending.get(key, 0)
            if missing <= 0:
                return
            self._pending[key] = self._pending.get(key, 0) + missing
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="rlm-spare-workers", daemon=True)
                self._thread.start()
        for _ in range(missing):
            self._queue.put(key)

    def _next_trim(self) -> float | None:
        """Seconds until a key with idle extras falls quiet (the lock is held); None when none has extras."""
        deadlines = [
            self._last_take.get(key, 0.0) + self.quiet_period for key, idle in self._idle.items() if len(idle) > 1
        ]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _serve(self) -> None:
        try:
            sweep_stale()
        except OSError as exc:
            logger.debug("could not sweep stale sandbox folders: %s", exc)
        while True:
            with self._lock:
                wait = self._next_trim()
            try:
                key = self._queue.get(timeout=None if wait is None else wait + 0.01)
            except queue.Empty:
                key = None
            if key is None:
                self.trim()
                continue
            worker: Worker | None = None
            try:
                worker = new_worker(key)
            except Exception as exc:  # the run that needs it will start its own and report any error
                logger.debug("could not start a spare sandbox worker: %s", exc)
            stale: Worker | None = None
            with self._lock:
                self._pending[key] = max(0, self._pending.get(key, 0) - 1)
                if not self._pending[key]:
                    del self._pending[key]
                if worker is not None:
                    self.spawned += 1
                    idle = self._idle.setdefault(key, [])
                    if self._closed or len(idle) >= self._demand.get(key, 1):  # the cap, not the target
                        stale = worker
                    else:
                        idle.append(worker)
                self._lock.notify_all()
            if stale is not None:
                dispose(stale)

    def trim(self, now: float | None = None) -> int:
        """Kill the idle extras (beyond one) of every key quiet since `quiet_period`; returns how many.

        Args:
            now: The `time.monotonic` time to judge quiet by (default: now).
        """
        now = time.monotonic() if now is None else now
        extras: list[Worker] = []
        with self._lock:
            for key, idle in self._idle.items():
                if now - self._last_take.get(key, 0.0) < self.quiet_period:
                    continue
                self._demand[key] = 1
                while len(idle) > 1:
                    extras.append(idle.pop())  # the newest: the oldest is the likeliest to be ready
            self._trimming += len(extras)
        for worker in extras:
            dispose(worker)
        with self._lock:
            self._trimming -= len(extras)
            self.trimmed += len(extras)
            self._lock.notify_all()
        return len(extras)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no spare is being started; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._pending, timeout)

    def wait_trimmed(self, key: SpareKey, timeout: float = 10.0) -> bool:
        """Wait until `key` has at most one idle worker and its extras are dead; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: len(self._idle.get(key, ())) <= 1 and not self._trimming, timeout)

    def idle_count(self, key: SpareKey) -> int:
        """How many idle workers `key` has now."""
        with self._lock:
            return len(self._idle.get(key, ()))

    def pids(self) -> set[int]:
        """The host pids of the idle spares (the launched process of each)."""
        with self._lock:
            return {w.popen.pid for idle in self._idle.values() for w in idle}

    def idle_pids(self, key: SpareKey) -> list[int]:
        """The host pids of the idle spares of `key`, the next to be taken first."""
        with self._lock:
            return [w.popen.pid for w in self._idle.get(key, ())]

    def cgroup_paths(self) -> set[Path]:
        """The cgroup folders of the idle spares."""
        with self._lock:
            return {
                path for idle in self._idle.values() for w in idle if w.cgroup is not None for path in w.cgroup.paths
            }

    def spare_pid(self, key: SpareKey) -> int | None:
        """The host pid of the idle spare for `key` that the next take gets, if there is one."""
        with self._lock:
            idle = self._idle.get(key)
            return idle[0].popen.pid if idle else None

    def keys(self) -> set[SpareKey]:
        """The keys with an idle spare."""
        with self._lock:
            return {key for key, idle in self._idle.items() if idle}

    def _drain(self) -> list[Worker]:
        """Remove every idle worker from the pool (the lock is held)."""
        workers = [w for idle in self._idle.values() for w in idle]
        self._idle.clear()
        return workers

    def clear(self) -> None:
        """Kill every idle spare and forget the demand (the pool stays usable)."""
        self.wait_idle()
        with self._lock:
            workers = self._drain()
            self._demand.clear()
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
            workers = [*self._drain(), *self._owned.values()]
            self._owned.clear()
            self._held.clear()
        for worker in workers:
            dispose(worker)


POOL = SparePool()
atexit.register(POOL.close)
