"""Spare workers: pre-started workers per launch shape, so that a new run level starts at once.

A worker is generic until its ``init`` frame (see `process`), so it can be started before any run needs it.
`SparePool` keeps as many idle workers per `SpareKey` (everything that shapes the launch or the limits) as
recent demand asked for (one at least, `max_per_key` at most), refills them in the background, kills the
extras after a quiet period, hands each worker to one run only, and kills the idle ones when the process
exits. Spares are started from one long-lived thread: bubblewrap's ``--die-with-parent``
follows the thread that started it, which must therefore outlive the worker.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from pathlib import Path

from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.subprocess.process import SpareKey, Worker, dispose, new_worker, sweep_stale_groups

logger = logging.getLogger("rlm_adapters.sandbox")


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
            sweep_stale_groups()
        except OSError as exc:
            logger.debug("could not sweep the cgroups of killed processes: %s", exc)
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

    def reset(self) -> None:
        """Kill every idle spare and forget the demand and the counts (the pool stays usable).

        Workers that runs hold are theirs: they are left alone, and handed back as their runs close.
        """
        self.wait_idle()
        with self._lock:
            workers = self._drain()
            self._demand.clear()
            self._last_take.clear()
            self.taken = self.spawned = self.trimmed = 0
        for worker in workers:
            dispose(worker)

    def close(self) -> None:
        """Kill every idle spare and start no more (run at interpreter exit)."""
        REAPER.flush(10.0)  # closes in progress hand their workers back first
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
