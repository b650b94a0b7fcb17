"""The slow end of a close, off the run's path: reaping killed workers, removing their cgroups and folders.

A run that closes its sandbox kills every process of it at once (SIGKILL to the process group and to all
that its cgroup holds), so no model code runs past the close. What follows is only waiting: for the kernel
to reap the processes and empty the cgroup, and for folders that were mount points inside a sandbox to be
removed (tens of milliseconds each while many sandbox namespaces are torn down together). No answer should
wait for that, and an event loop must not block on it, so `Reaper` does it in one background thread.

`flush` waits until everything handed over so far is done. It runs at interpreter exit (before the spare
pool's own exit hook), and tests call it before looking for leftovers. A host killed outright leaves
folders and cgroups that the next process sweeps (`tempdirs.sweep`, `subprocess/process.sweep_stale_groups`).
The engine hands it a run's own folder too, for every sandbox kind.

Nothing happens at import: the thread, the exit hook and the fork hook start with the first job.
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
    """One background thread that runs clean-up jobs in the order they were handed over (started on first use)."""

    def __init__(self) -> None:
        self._hooked = False
        self._forget()

    def _forget(self) -> None:
        """No thread and nothing pending: a fresh object, or a forked child (whose copied lock may be held)."""
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()  # None: the thread ends
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pending = 0
        self.done = 0

    def submit(self, job: Job) -> None:
        """Run `job` in the background; its exceptions are logged, never raised."""
        with self._lock:
            self._pending += 1
            if not self._hooked:
                self._hooked = True
                # At exit, also when no subprocess sandbox ran (the spare pool's exit hook flushes first
                # otherwise): a run's folder. A forked child has this object but not its thread: it starts
                # its own, with nothing pending (the parent's closes are the parent's to finish).
                atexit.register(self.flush, 10.0)
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=self._forget)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, args=(self._queue,), name="rlm-sandbox-reaper", daemon=True
                )
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

    @property
    def running(self) -> bool:
        """Whether the thread is started."""
        with self._lock:
            return self._thread is not None

    def reset(self, timeout: float | None = 30.0) -> bool:
        """Finish what was handed over (`flush`), then end the thread; the next job starts a new one.

        Returns False, and keeps the thread, if the jobs did not finish within `timeout`.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: self._pending == 0, timeout):
                return False
            thread, self._thread = self._thread, None
            jobs, self._queue = self._queue, queue.SimpleQueue()
            self.done = 0
        if thread is not None:
            jobs.put(None)
            thread.join(timeout)
        return True

    def _serve(self, jobs: queue.SimpleQueue[Job | None]) -> None:
        # Its own queue: `reset` gives the next thread a new one.
        while (job := jobs.get()) is not None:
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
