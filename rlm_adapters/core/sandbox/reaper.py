"""The slow end of a close, off the run's path: reaping killed workers, removing their cgroups and folders.

A run that closes its sandbox kills every process of it at once (SIGKILL to the process group and to all
that its cgroup holds), so no model code runs past the close. What follows is only waiting: for the kernel
to reap the processes and empty the cgroup, and for folders that were mount points inside a sandbox to be
removed (tens of milliseconds each while many sandbox namespaces are torn down together). No answer should
wait for that, and an event loop must not block on it, so `Reaper` does it in one background thread.

`flush` waits until everything handed over so far is done. It runs at interpreter exit (before the spare
pool's own exit hook), and tests call it before looking for leftovers. A host killed outright leaves
folders and empty cgroups that the next process sweeps (`process.sweep_stale`).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger("rlm_adapters.sandbox")

Job = Callable[[], None]


class Reaper:
    """One background thread that runs clean-up jobs in the order they were handed over."""

    def __init__(self) -> None:
        self._reset()
        self.done = 0
        if hasattr(os, "register_at_fork"):
            # A forked child has this object but not its thread: it starts its own, with nothing pending
            # (the parent's closes are the parent's to finish).
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._queue: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pending = 0

    def submit(self, job: Job) -> None:
        """Run `job` in the background; its exceptions are logged, never raised."""
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="rlm-sandbox-reaper", daemon=True)
                self._thread.start()
        self._queue.put(job)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every job handed over so far has run; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._pending == 0, timeout)

    @property
    def pending(self) -> int:
        """Jobs handed over and not finished yet."""
        with self._lock:
            return self._pending

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception:  # one failed clean-up must not stop the others
                logger.exception("a sandbox clean-up job failed")
            finally:
                with self._lock:
                    self._pending -= 1
                    self.done += 1
                    self._lock.notify_all()


REAPER = Reaper()
# Also when no subprocess sandbox ran (the spare pool's exit hook flushes first otherwise): a run's folder.
atexit.register(REAPER.flush, 10.0)
