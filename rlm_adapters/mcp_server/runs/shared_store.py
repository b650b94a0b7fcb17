"""The background runs and MCP tasks of ``rlm-mcp --store URL``, in the PostgreSQL store its replicas share.

One row of ``rlm_runs`` a run (`postgres_schema` version 2): its principal and arguments, its state and result
(bounded as `store.RunStore` bounds a record: `MAX_RECORD_BYTES`), the replica running it and that replica's
lease, and, for an MCP task, its creation time and ttl. Any replica finds a run by id for its principal; a run
whose lease lapsed (its replica is gone) is `SharedRun.lost`, and the first replica to `claim` it (one atomic
``UPDATE``) runs it again, its model calls that came back replaying from the shared call cache.

Writes go to one thread of the store, in order, never the event loop. The replica's lease thread
(`replica.Replica`) renews the leases of the runs working here, stops those another replica cancelled (their
row says ``cancelled``), writes the results the store could not take when they ended, and drops what is kept no
longer. A store that is down when a run ends costs no answer: the result is kept in memory (the book holds it for
callers on this replica) and written at a later renewal, with one warning.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from rlm_adapters.core.cache import PostgresStore, StoreConnection
from rlm_adapters.errors import StoreError
from rlm_adapters.mcp_server.replica import Replica
from rlm_adapters.mcp_server.runs.store import ARGUMENTS, MAX_RECORD_BYTES, STATES, SharedRun, State, too_large

logger = logging.getLogger("rlm_adapters.mcp_server")

_COLUMNS = (
    "principal, arguments, state, result, error, extract(epoch FROM finished_at)::float8, replica, "
    "state = 'working' AND lease_expires < now(), extract(epoch FROM task_created_at)::float8, task_ttl_ms"
)
# An ended run is kept keep_seconds (a task: its ttl) after it ended.
_KEPT = "(state = 'working' OR finished_at >= now() - make_interval(secs => coalesce(task_ttl_ms / 1000.0, %(keep)s)))"
_START = """
INSERT INTO rlm_runs (id, principal, arguments, state, replica, lease_expires)
VALUES (%(id)s, %(principal)s, %(arguments)s::json, 'working', %(replica)s, now() + make_interval(secs => %(lease)s))
ON CONFLICT (id) DO UPDATE SET replica = excluded.replica, lease_expires = excluded.lease_expires
"""
# An end that another replica's cancel (or end) came first to leaves the row as it is.
_END = """
INSERT INTO rlm_runs (id, principal, arguments, state, result, error, replica, lease_expires, finished_at)
VALUES (%(id)s, %(principal)s, '{}'::json, %(state)s, %(result)s::json, %(error)s, %(replica)s, now(), now())
ON CONFLICT (id) DO UPDATE SET state = excluded.state, result = excluded.result, error = excluded.error,
    finished_at = excluded.finished_at
WHERE rlm_runs.state = 'working'
"""
_CLAIM = """
UPDATE rlm_runs SET replica = %(replica)s, lease_expires = now() + make_interval(secs => %(lease)s)
WHERE id = %(id)s AND state = 'working' AND lease_expires < now() RETURNING id
"""
_CANCEL = """
UPDATE rlm_runs SET state = 'cancelled', finished_at = now()
WHERE id = %(id)s AND principal = %(principal)s AND state = 'working' RETURNING id
"""
_RENEW = """
UPDATE rlm_runs SET lease_expires = now() + make_interval(secs => %(lease)s)
WHERE id = ANY(%(ids)s) AND replica = %(replica)s AND state = 'working'
"""
_TRIM = f"""
DELETE FROM rlm_runs WHERE NOT {_KEPT}
    OR (state = 'working' AND lease_expires < now() - make_interval(secs => %(keep)s))
    OR id IN (SELECT id FROM rlm_runs WHERE state <> 'working' ORDER BY finished_at DESC OFFSET %(results)s)
"""


def _json(value: Any) -> str:
    # ASCII-escaped: a result's NUL or lone surrogate is "\\u0000" in the text PostgreSQL keeps.
    return json.dumps(value, ensure_ascii=True)


class SharedRunStore:
    """The runs of every replica on one store (the `store.RunStore` interface, and what replicas need).

    Args:
        database: The store.
        keep_results: Ended runs kept (the oldest are dropped first).
        keep_seconds: Seconds an ended run is kept (an MCP task: its ttl).
        replica: This process, whose lease thread renews the runs working here.
        max_record_bytes: The largest result kept (a larger one is kept as a failure saying so).
    """

    def __init__(
        self,
        database: PostgresStore,
        keep_results: int,
        keep_seconds: float,
        replica: Replica,
        *,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        self.database = database
        self.path = database.shown  # how warnings name the store (as `RunStore.path` names its folder)
        self.keep_results = keep_results
        self.keep_seconds = keep_seconds
        self.replica = replica
        self.max_record_bytes = max_record_bytes
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlm-mcp-runs")
        self._lock = threading.Lock()
        self._held: dict[str, Callable[[], None]] = {}  # run id -> stop it (callable from any thread)
        self._unwritten: dict[str, dict[str, Any]] = {}  # run id -> its end, the store being down
        self._down = False  # the lease thread's last renewal failed (warned once)
        replica.every_renewal(self._renew, self._release)

    # -- the RunStore interface -----------------------------------------------------------------------
    def find(self, principal: str, run_id: str) -> SharedRun | None:
        """`principal`'s run `run_id` as the store has it now (None: unknown, expired, another's).

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        return self.database.run(self._find, principal, run_id)

    def started(self, run_id: str, principal: str, arguments: Mapping[str, Any]) -> None:
        """A run started here: its row, holding this replica's lease, written before it does any work."""
        values: dict[str, Any] = {"id": run_id, "principal": principal, "replica": self.replica.id}
        values |= {"arguments": _json({k: arguments.get(k) for k in ARGUMENTS}), "lease": self._lease()}
        self._submit(self._execute_now, _START, values)

    def ended(
        self,
        run_id: str,
        principal: str,
        state: State,
        result: BaseModel | dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """A run that worked here ended: its result (or error, or cancellation) written by the store's thread."""
        with self._lock:
            self._held.pop(run_id, None)
        self._submit(self._end, run_id, principal, state, result, error)

    def flush(self) -> None:
        """Wait until every write made so far is in the store (or kept for a later renewal, with a warning)."""
        with contextlib.suppress(RuntimeError):  # closed: nothing is left to wait for
            self._writer.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the writes made so far, try once more those the store could not take, end the store's thread
        and the replica's lease thread (giving up the leases it held: another replica takes its unfinished runs
        and sessions over at once), and close the store's connections."""
        self._writer.shutdown(wait=True)
        self._write_unwritten()
        self.replica.close()
        self.database.close()
        with self._lock:
            left = len(self._unwritten)
        if left:
            logger.warning(
                "the store %s is still unreachable: %d ended runs' results are not written; on another replica "
                "those runs are lost and run again when asked (their model calls replay from the cache)",
                self.path,
                left,
            )

    # -- what replicas add --------------------------------------------------------------------------
    def hold(self, run_id: str, stop: Callable[[], None]) -> None:
        """The run `run_id` works here: renew its lease, and call `stop` (from the lease thread) when another
        replica cancels it."""
        with self._lock:
            self._held[run_id] = stop

    def claim(self, run_id: str) -> bool:
        """Take over a lost run (its lease lapsed): True if this replica now holds it, False if another was
        first or it is no longer lost.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        values = {"id": run_id, "replica": self.replica.id, "lease": self._lease()}
        return bool(self.database.fetch_all(_CLAIM, values))

    def cancel(self, principal: str, run_id: str) -> bool:
        """Mark `principal`'s working run cancelled (its replica stops it at its next renewal); False if it
        had ended already.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        return bool(self.database.fetch_all(_CANCEL, {"id": run_id, "principal": principal}))

    def mark_task(self, run_id: str, ttl_ms: int) -> None:
        """The run `run_id` is an MCP task kept `ttl_ms` after it ends (written after its start, in order)."""
        statement = "UPDATE rlm_runs SET task_created_at = now(), task_ttl_ms = %(ttl)s WHERE id = %(id)s"
        self._submit(self._execute_now, statement, {"id": run_id, "ttl": ttl_ms})

    def tasks(self, principal: str) -> list[tuple[str, SharedRun]]:
        """`principal`'s MCP tasks the store keeps, oldest first, with their ids.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        return self.database.run(self._tasks, principal)

    # -- jobs (a pooled connection, in a worker thread) ---------------------------------------------
    def _lease(self) -> float:
        return self.replica.lease.expires_after

    def _find(self, connection: StoreConnection, principal: str, run_id: str) -> SharedRun | None:
        query = f"SELECT {_COLUMNS} FROM rlm_runs WHERE id = %(id)s AND principal = %(principal)s AND {_KEPT}"
        values = {"id": run_id, "principal": principal, "keep": self.keep_seconds}
        row = connection.execute(query, values).fetchone()
        return None if row is None else _parse(row)

    def _tasks(self, connection: StoreConnection, principal: str) -> list[tuple[str, SharedRun]]:
        query = (
            f"SELECT id, {_COLUMNS} FROM rlm_runs WHERE principal = %(principal)s AND task_ttl_ms IS NOT NULL "
            f"AND {_KEPT} ORDER BY task_created_at LIMIT %(limit)s"
        )
        values = {"principal": principal, "keep": self.keep_seconds, "limit": self.keep_results * 2}
        found = []
        for row in connection.execute(query, values).fetchall():
            stored = _parse(row[1:])
            if stored is not None:
                found.append((str(row[0]), stored))
        return found

    # -- the store's thread -------------------------------------------------------------------------
    def _submit(self, job: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                job(*args)
            except StoreError as exc:
                logger.warning("could not write to the runs store: %s", exc)
            except Exception:
                logger.warning("could not write to the runs store %s", self.path, exc_info=True)

        try:
            self._writer.submit(run)
        except RuntimeError:  # closed: the server is stopping
            logger.warning("the runs store %s is closed; a run's record is not written", self.path)

    def _execute_now(self, statement: str, values: Mapping[str, Any]) -> None:
        self.database.execute(statement, values)

    def _end(
        self,
        run_id: str,
        principal: str,
        state: State,
        result: BaseModel | dict[str, Any] | None,
        error: str | None,
    ) -> None:
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json", by_alias=True)
        body = _json(result) if result is not None else None
        if body is not None and len(body) > self.max_record_bytes:
            kept = too_large(SharedRun(principal, {}, state), len(body), self.max_record_bytes, 0.0)
            state, body, error = "failed", None, kept.error
        values = {"id": run_id, "principal": principal, "state": state, "result": body, "error": error}
        values["replica"] = self.replica.id
        try:
            self._execute_now(_END, values)
        except StoreError as exc:
            with self._lock:
                first = not self._unwritten
                self._unwritten[run_id] = values
            if first:
                logger.warning(
                    "run %s… ended but %s: its result is kept in memory and written when the store is back",
                    run_id[:6],
                    exc,
                )

    # -- the lease thread ---------------------------------------------------------------------------
    def _renew(self) -> None:
        """One renewal: unwritten ends, then leases (stopping what another replica cancelled), then the trim.
        A store that is down is one warning until it is back (the runs here go on meanwhile)."""
        try:
            self._write_unwritten()
            with self._lock:
                held = dict(self._held)
            if held:
                for run_id in self.database.run(self._renew_leases, list(held)):
                    stop = held.get(run_id)
                    if stop is not None:
                        stop()
            self.database.execute(_TRIM, {"keep": self.keep_seconds, "results": self.keep_results})
        except StoreError as exc:
            if not self._down:
                logger.warning(
                    "replica %s cannot renew its runs' leases: %s; they go on here, and after %g s other replicas "
                    "see them lost",
                    self.replica.id,
                    exc,
                    self.replica.lease.expires_after,
                )
            self._down = True
            return
        if self._down:
            logger.info("replica %s renews its runs' leases again (the store %s is back)", self.replica.id, self.path)
        self._down = False

    def _release(self) -> None:
        """The server stops: the runs it leaves unfinished are lost now, for another replica to take over."""
        with self._lock:
            held = list(self._held)
        if held:
            statement = "UPDATE rlm_runs SET lease_expires = now() - interval '1 second' WHERE id = ANY(%(ids)s) "
            statement += "AND replica = %(replica)s AND state = 'working'"
            with contextlib.suppress(StoreError):  # down: they lapse after the lease
                self._execute_now(statement, {"ids": held, "replica": self.replica.id})

    def _renew_leases(self, connection: StoreConnection, ids: list[str]) -> list[str]:
        """Renew the leases of `ids`; the ids among them another replica cancelled."""
        connection.execute(_RENEW, {"ids": ids, "replica": self.replica.id, "lease": self._lease()})
        rows = connection.execute(
            "SELECT id FROM rlm_runs WHERE id = ANY(%(ids)s) AND state = 'cancelled'", {"ids": ids}
        ).fetchall()
        return [str(row[0]) for row in rows]

    def _write_unwritten(self) -> None:
        with self._lock:
            unwritten = dict(self._unwritten)
        for run_id, values in unwritten.items():
            try:
                self._execute_now(_END, values)
            except StoreError:
                return  # still down: the next renewal tries again (and says so)
            with self._lock:
                self._unwritten.pop(run_id, None)
            logger.info("run %s…'s result, kept while the store was down, is written", run_id[:6])


def _parse(row: tuple[Any, ...]) -> SharedRun | None:
    """A row as a `SharedRun`, or None for one this code did not write (a hand-edited row is unknown)."""
    principal, arguments, state, result, error, finished, replica, lost, created, ttl = row
    if state not in STATES or not isinstance(arguments, dict) or not set(arguments) <= ARGUMENTS:
        return None
    if result is not None and not isinstance(result, dict):
        return None
    return SharedRun(
        principal=str(principal),
        arguments=arguments,
        state=state,
        result=result,
        error=error,
        finished=finished,
        replica=str(replica),
        lost=bool(lost),
        task_created_at=created,
        task_ttl_ms=ttl,
    )


__all__ = ["SharedRunStore"]
