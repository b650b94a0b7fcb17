"""Spare workers: one pre-started worker per launch shape, so that a new run level starts at once.

A worker is generic until its ``init`` frame (see `process`), so it can be started before any run needs it.
`SparePool` keeps at most one idle worker per `SpareKey` (everything that shapes the launch or the limits),
refills it in the background after a take, hands each worker to one run only, and kills the idle ones
when the process exits. Spares are started from one long-lived thread: bubblewrap's ``--die-with-parent``
follows the thread that started it, which must therefore outlive the worker.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from pathlib import Path

from rlm_adapters.core.sandbox.process import SpareKey, Worker, dispose, new_worker, sweep_stale

logger = logging.getLogger("rlm_adapters.sandbox")


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
