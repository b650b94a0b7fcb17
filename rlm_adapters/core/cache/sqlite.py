"""`SQLiteCallCache`: the default call cache, one SQLite file in WAL mode, shared safely by processes.

Every read and write goes to one thread per store, which owns its connection: the event loops that use
the store (a run's, a session's, several at once) never block on the disk, and writes that arrive together
share one commit (``synchronous=FULL``: a committed reply survives a kill and a power cut). A ``put``
returns once its commit has, so a reply is on disk before the run uses it. The thread ends after a few idle
seconds and starts again on the next call; a forked child starts its own. Other processes may use the same
file at once: SQLite's locks serialise the writers (each waits up to `busy_timeout`), and the first reply
stored under a key is the one every later reader gets.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from rlm_adapters.core.cache.base import CachedReply
from rlm_adapters.core.cache.sqlite_file import COLUMNS, connect, explain, logger, prepare
from rlm_adapters.errors import CacheError

_SELECT = "SELECT text, input_tokens, output_tokens, model, cost FROM calls WHERE key = ?"
_INSERT = f"INSERT OR IGNORE INTO calls ({', '.join(COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?)"
_MAX_BATCH = 512


@dataclass
class _Job:
    kind: Literal["get", "put"]
    key: str
    reply: CachedReply | None = None
    future: concurrent.futures.Future[CachedReply | None] = field(default_factory=concurrent.futures.Future)


class _Worker(threading.Thread):
    """The thread that owns the store's connection and serves its jobs."""

    def __init__(self, store: SQLiteCallCache) -> None:
        super().__init__(name="rlm-call-cache", daemon=True)
        self.store = store
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.ended = False  # set under the store's lock, so that no job is queued to a thread that left

    def run(self) -> None:
        store = self.store
        try:
            connection = connect(store.path, store.busy_timeout)
            connection.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            self._end(CacheError(store.path, explain(exc, store.path)))
            return
        except CacheError as exc:  # a companion planted while no connection was open: nothing is read
            self._end(exc)
            return
        try:
            while (batch := self._next_batch()) is not None:
                self._serve(connection, batch)
        finally:
            connection.close()

    def _next_batch(self) -> list[_Job] | None:
        while True:
            try:
                job = self.jobs.get(timeout=self.store.idle_seconds)
                break
            except queue.Empty:
                with self.store.lock:
                    if self.jobs.empty():
                        self.ended = True
                        return None
        if job is None:
            return None
        batch = [job]
        while len(batch) < _MAX_BATCH:
            try:
                more = self.jobs.get_nowait()
            except queue.Empty:
                break
            if more is None:
                self.jobs.put(None)  # served after this batch
                break
            batch.append(more)
        return batch

    def _end(self, error: CacheError) -> None:
        with self.store.lock:
            self.ended = True
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_exception(error)

    def _serve(self, connection: sqlite3.Connection, batch: list[_Job]) -> None:
        """Serve jobs in order; consecutive writes share one transaction and one commit."""
        index = 0
        while index < len(batch):
            if batch[index].kind == "get":
                self._get(connection, batch[index])
                index += 1
                continue
            end = index
            while end < len(batch) and batch[end].kind == "put":
                end += 1
            self._put(connection, batch[index:end])
            index = end

    def _get(self, connection: sqlite3.Connection, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            job.future.set_result(self._read(connection, job.key))
        except sqlite3.Error as exc:
            job.future.set_exception(CacheError(self.store.path, explain(exc, self.store.path)))

    def _read(self, connection: sqlite3.Connection, key: str) -> CachedReply | None:
        row = connection.execute(_SELECT, (key,)).fetchone()
        if row is None:
            return None
        reply = CachedReply.checked(*row)
        if reply is None:
            logger.warning(
                "the call cache %s holds an entry this library did not write; it is ignored", self.store.path
            )
        return reply

    def _put(self, connection: sqlite3.Connection, jobs: list[_Job]) -> None:
        jobs = [job for job in jobs if job.future.set_running_or_notify_cancel()]
        now = time.time()
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                inserted = []
                for job in jobs:
                    reply = job.reply
                    assert reply is not None
                    row = (job.key, reply.text, reply.model, reply.input_tokens, reply.output_tokens, reply.cost, now)
                    inserted.append(connection.execute(_INSERT, row).rowcount == 1)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            error = CacheError(self.store.path, explain(exc, self.store.path))
            for job in jobs:
                job.future.set_exception(error)
            return
        for job, new in zip(jobs, inserted, strict=True):
            # The first reply stored under a key wins: a writer that lost the race gets the stored one.
            try:
                stored = job.reply if new else self._read(connection, job.key)
            except sqlite3.Error:
                stored = None  # committed; what the other writer stored cannot be read now
            job.future.set_result(stored or job.reply)


class SQLiteCallCache:
    """A call cache in one SQLite file (``RLM(cache="calls.sqlite")`` opens one).

    Args:
        path: The file. Created ``0600`` (with its folder) when missing; an existing file must be a call
            cache this library wrote, and anything else is refused with a `CacheError` and left as it is.
        busy_timeout: Seconds a write waits for another process's lock before it fails.
        idle_seconds: The store's thread ends after this long without a call (the next call starts it again).

    Raises:
        CacheError: when the file cannot be used, naming it and why.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0, idle_seconds: float = 5.0) -> None:
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        self.busy_timeout = busy_timeout
        self.idle_seconds = idle_seconds
        prepare(self.path, busy_timeout)
        self.lock = threading.Lock()
        self._worker: _Worker | None = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"SQLiteCallCache({self.path!r})"

    async def get(self, key: str) -> CachedReply | None:
        """The reply stored under `key`, or None."""
        return await asyncio.wrap_future(self._submit(_Job("get", key)))

    async def put(self, key: str, reply: CachedReply) -> CachedReply:
        """Store `reply` under `key` (unless a reply is stored there already) and commit; return the stored one.

        The write finishes even when the caller is cancelled meanwhile: the reply it stores was paid for.
        """
        stored = await asyncio.shield(asyncio.wrap_future(self._submit(_Job("put", key, reply))))
        return stored or reply

    def close(self) -> None:
        """Finish the queued jobs and end the store's thread (a later call starts a new one)."""
        with self.lock:
            worker, self._worker = self._worker, None
            if worker is not None and not worker.ended:
                worker.jobs.put(None)
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=self.busy_timeout + 5)

    def _submit(self, job: _Job) -> concurrent.futures.Future[CachedReply | None]:
        if os.getpid() != self._pid:  # a forked child: the parent's thread and lock are not ours
            self._pid, self.lock, self._worker = os.getpid(), threading.Lock(), None
        with self.lock:
            if self._worker is None or self._worker.ended:
                self._worker = _Worker(self)
                self._worker.start()
            self._worker.jobs.put(job)
        return job.future
