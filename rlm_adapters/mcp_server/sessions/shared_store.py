"""The ``session=`` records of ``rlm-mcp --store URL``: one row a session, naming the replica holding its sandbox.

A session's REPL lives in one replica's memory, so its calls must reach that replica: the record (``rlm_sessions``,
`postgres_schema` version 2: principal, name, replica, lease, options, turns) says which one. A replica opening a
session takes the record in one atomic statement; a call naming a session another replica holds is refused with
`SessionElsewhere`, which names that replica and what to configure (sticky routing). A session whose replica is
gone (its lease lapsed: `replica.Lease`) is taken over: its turns are run again in a new REPL here, as a restart
with ``--cache`` replays them (`store.SessionStore`), every model call replaying from the shared call cache.

The store being down never fails a call: the session goes on here unrecorded, with one warning.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from rlm_adapters.core.cache import PostgresStore, StoreConnection
from rlm_adapters.errors import QueryError, StoreError
from rlm_adapters.mcp_server.replica import Replica
from rlm_adapters.mcp_server.sessions.store import TURN_KEYS

logger = logging.getLogger("rlm_adapters.mcp_server")

MAX_RECORD_BYTES = 16 << 20
_FOREVER = 10.0**9  # seconds: no idle limit
# Taken when this replica holds it or its holder's lease lapsed; its turns kept only for the same options and
# while the session would not have closed idle.
_TAKE = """
INSERT INTO rlm_sessions (principal, name, replica, lease_expires, options, turns)
VALUES (%(principal)s, %(name)s, %(replica)s, now() + make_interval(secs => %(lease)s), %(options)s::json, '[]'::json)
ON CONFLICT (principal, name) DO UPDATE SET replica = excluded.replica, lease_expires = excluded.lease_expires,
    options = excluded.options, updated_at = now(),
    turns = CASE WHEN rlm_sessions.options::text = excluded.options::text
        AND rlm_sessions.updated_at >= now() - make_interval(secs => %(idle)s)
        THEN rlm_sessions.turns ELSE '[]'::json END
WHERE rlm_sessions.replica = excluded.replica OR rlm_sessions.lease_expires < now()
RETURNING turns
"""
_RECORD = """
INSERT INTO rlm_sessions (principal, name, replica, lease_expires, options, turns)
VALUES (%(principal)s, %(name)s, %(replica)s, now() + make_interval(secs => %(lease)s), %(options)s::json,
    %(turns)s::json)
ON CONFLICT (principal, name) DO UPDATE SET turns = excluded.turns, options = excluded.options,
    replica = excluded.replica, lease_expires = excluded.lease_expires, updated_at = now()
WHERE rlm_sessions.replica = excluded.replica OR rlm_sessions.lease_expires < now()
"""


_RENEW = """
WITH renewed AS (
    UPDATE rlm_sessions SET lease_expires = now() + make_interval(secs => %(lease)s) WHERE replica = %(r)s
)
DELETE FROM rlm_sessions WHERE replica <> %(r)s AND lease_expires < now()
    AND updated_at < now() - make_interval(secs => %(idle)s)
"""


class SessionElsewhere(QueryError):
    """A call for a session whose sandbox another replica holds.

    Attributes:
        replica: The replica holding it.
    """

    def __init__(self, name: str, replica: str, here: str) -> None:
        super().__init__(
            f"session={name!r} is open on replica {replica}, which holds its sandbox, but this call reached replica "
            f"{here}: route each client to one replica (sticky routing on the Mcp-Session-Id header, or client "
            "affinity, in the load balancer), or use another session name"
        )
        self.replica = replica


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, sort_keys=True)  # sorted: options compare as text


class SharedSessionStore:
    """The session records of every replica on one store (`store.SessionStore`'s interface).

    Args:
        database: The store.
        replica: This process, whose lease thread renews the sessions it holds.
        idle_seconds: A record not written for this long is not taken over (its session would have closed idle).
    """

    def __init__(self, database: PostgresStore, replica: Replica, idle_seconds: float | None = None) -> None:
        self.database = database
        self.replica = replica
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str], tuple[str, list[dict[str, Any]]]] = {}  # (client key, name) -> record
        self._warned = False
        replica.every_renewal(self._renew, self._release)

    def claim(self, principal: str, name: str, options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Take `principal`'s session `name` for this replica: the calls to run again in its new REPL (empty
        for a new session, or one opened with other options).

        Raises:
            SessionElsewhere: another replica holds it, and its lease has not lapsed.
        """
        values: dict[str, Any] = {"principal": principal, "name": name, "replica": self.replica.id}
        values["options"] = _json(dict(options))
        values |= {"lease": self.replica.lease.expires_after, "idle": self.idle_seconds or _FOREVER}
        try:
            taken, holder = self.database.run(self._take, values)
        except StoreError as exc:
            self._warn(exc)
            return []
        if holder is not None:
            raise SessionElsewhere(name, holder, self.replica.id)
        return [turn for turn in taken if isinstance(turn, dict) and set(turn) <= TURN_KEYS]

    def record(
        self, key: str, principal: str, name: str, options: Mapping[str, Any], turns: list[dict[str, Any]]
    ) -> None:
        """The session (`key`'s, named `name`) now stands on `turns`; written to the store at once."""
        with self._lock:
            self._live[(key, name)] = (principal, list(turns))
        body = _json(turns)
        if len(body) > MAX_RECORD_BYTES:
            logger.warning(
                "session %r's calls (%d MiB) are more than the %d MiB the store keeps: another replica taking it "
                "over starts it empty",
                name,
                len(body) >> 20,
                MAX_RECORD_BYTES >> 20,
            )
            body = "[]"
        values: dict[str, Any] = {"principal": principal, "name": name, "replica": self.replica.id}
        values["options"] = _json(dict(options))
        values |= {"lease": self.replica.lease.expires_after, "turns": body}
        try:
            self.database.execute(_RECORD, values)
        except StoreError as exc:
            self._warn(exc)

    def turns(self, key: str, name: str) -> list[dict[str, Any]]:
        """The calls a live session stands on (empty when none is recorded)."""
        with self._lock:
            live = self._live.get((key, name))
        return list(live[1]) if live is not None else []

    def forget(self, key: str, name: str) -> None:
        """The session closed for good: its record goes (no replica takes it over)."""
        with self._lock:
            live = self._live.pop((key, name), None)
        if live is None:
            return
        statement = "DELETE FROM rlm_sessions WHERE principal = %(p)s AND name = %(n)s AND replica = %(r)s"
        try:
            self.database.execute(statement, {"p": live[0], "n": name, "r": self.replica.id})
        except StoreError as exc:
            self._warn(exc)

    def _warn(self, exc: StoreError) -> None:
        if not self._warned:  # once: the session goes on here, unrecorded
            logger.warning("session records are not written (%s); the sessions go on on this replica", exc)
        self._warned = True

    def _take(self, connection: StoreConnection, values: Mapping[str, Any]) -> tuple[list[Any], str | None]:
        row = connection.execute(_TAKE, values).fetchone()
        if row is not None:
            return (row[0] if isinstance(row[0], list) else []), None
        holder = connection.execute(
            "SELECT replica FROM rlm_sessions WHERE principal = %(principal)s AND name = %(name)s", values
        ).fetchone()
        # None: its record went meanwhile; the session opens here and its first call writes it.
        return [], str(holder[0]) if holder is not None else None

    def _release(self) -> None:
        """The server stops: the sessions it keeps records of may be taken over by another replica now."""
        statement = "UPDATE rlm_sessions SET lease_expires = now() - interval '1 second' WHERE replica = %(r)s"
        with contextlib.suppress(StoreError):  # down: they lapse after the lease
            self.database.execute(statement, {"r": self.replica.id})

    def _renew(self) -> None:
        """Renew the leases of the sessions held here; drop the records of lost replicas' sessions idle too long
        to be taken over (they would have closed idle)."""
        values = {
            "lease": self.replica.lease.expires_after,
            "r": self.replica.id,
            "idle": self.idle_seconds or _FOREVER,
        }
        with contextlib.suppress(StoreError):  # the runs' renewal says the store is down, once
            self.database.execute(_RENEW, values)


__all__ = ["MAX_RECORD_BYTES", "SessionElsewhere", "SharedSessionStore"]
