"""`PostgresStore`: one PostgreSQL database as this library uses it, whatever it keeps there.

Opening it connects once, at once, and brings the schema up to date (`postgres_schema.migrate`), so an unreachable
server, a wrong password, a missing database or a newer schema is one `StoreError` at start, naming the URL
without its password and what to check. Then `run` lends a job a connection from a pool (psycopg_pool) that the
store object owns, opened at its first job and closed by `close` (a later job opens it again; a forked child
opens its own). The pool is the synchronous one, used from worker threads: the engine calls a store from several
event loops (a run's, a session's, a server's), and an async pool belongs to the one loop that opened it.

A server that goes away fails the job that met it, then every job for `retry_after` seconds without waiting on
the network (the pool is closed meanwhile, since it would log each reconnection it tried), so a run goes on
without the store at full speed and a store back up is used again. What is kept in the database is its users'
business: the call cache today (`postgres.py`); runs, tasks and keys are meant to be further users of one store.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import psycopg
import psycopg_pool

from rlm_adapters.core.cache.postgres_schema import LATEST, NewerSchemaError, migrate
from rlm_adapters.core.cache.store_url import is_postgres, shown_url, url_password
from rlm_adapters.errors import StoreError

Connection = psycopg.Connection[tuple[object, ...]]
T = TypeVar("T")
# A statement's parameters: named (%(name)s) or by position (%s).
Params = Mapping[str, object] | Sequence[object]


class PostgresStore:
    """A PostgreSQL database holding this library's tables, and the pool of connections to it.

    Args:
        url: A libpq URL (``postgresql://`` or ``postgres://``); the database must exist, and its tables are
            created (or brought up to date) when the store opens. A password left out of it is libpq's to find
            (``PGPASSWORD``, ``~/.pgpass``).
        connect_timeout: Seconds a connection may take, and a job may wait for a free one.
        max_connections: Connections the pool keeps open at most.
        retry_after: Seconds the store is not asked again after the server failed (a job meanwhile fails at once).

    Raises:
        StoreError: when the store cannot be reached or used, naming the URL without its password and why.
    """

    def __init__(
        self, url: str, *, connect_timeout: float = 10.0, max_connections: int = 8, retry_after: float = 10.0
    ) -> None:
        if not is_postgres(url):
            raise StoreError(shown_url(url), "is not a postgresql:// URL")
        self._url = url  # with its password: never in a message, a repr or a log
        self.shown = shown_url(url)
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[Connection] | None = None
        self._pid = os.getpid()
        self._down_until = 0.0
        self._open()

    def __repr__(self) -> str:
        return f"PostgresStore({self.shown!r})"

    def _connect_options(self) -> dict[str, object]:
        return {"connect_timeout": max(1, round(self.connect_timeout)), "autocommit": True}

    def _open(self) -> None:
        try:
            with psycopg.connect(self._url, **self._connect_options()) as connection:  # type: ignore[arg-type]
                migrate(connection)
        except NewerSchemaError as exc:
            raise StoreError(
                self.shown,
                f"holds schema version {exc.version}, newer than this rlm-adapters knows ({LATEST}): "
                "upgrade rlm-adapters, or name another database",
            ) from None
        except psycopg.Error as exc:
            raise StoreError(self.shown, self._explain(exc)) from None

    def _explain(self, error: BaseException) -> str:
        """What `error` says about the store, as the end of "the store URL ..." (never the password)."""
        text = " ".join(str(error).split())
        secret = url_password(self._url)
        if secret:
            text = text.replace(secret, "***")
        lowered = text.lower()
        parts = urllib.parse.urlsplit(self._url)
        if "password authentication failed" in lowered or "no password supplied" in lowered:
            return f"refused the password of user {parts.username!r}: check the password in the URL"
        if "does not exist" in lowered and "database" in lowered:
            name = parts.path.lstrip("/") or parts.username
            return f"has no database {name!r}: create it (createdb {name}) or name one that exists"
        if "role" in lowered and "does not exist" in lowered:
            return f"has no user {parts.username!r}: check the user in the URL"
        if isinstance(error, psycopg_pool.PoolTimeout | psycopg.OperationalError) and (
            "connect" in lowered or "timeout" in lowered or "timed out" in lowered or "couldn't get" in lowered
        ):
            return f"cannot be reached ({text}): check that PostgreSQL runs there and that the host and port are right"
        if isinstance(error, psycopg.errors.DiskFull) or "no space left" in lowered:
            return f"is out of disk space ({text}): free some on the database server"
        if "permission denied" in lowered:
            return f"refused this user a table ({text}): grant it CREATE on the database, or name another"
        return f"failed ({text})"

    def close(self) -> None:
        """Close the pool's connections (a later job opens a new pool)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()

    def run(self, job: Callable[..., T], *args: object) -> T:
        """``job(connection, *args)`` on a pooled connection, in this thread (`asyncio.to_thread` it).

        Raises:
            StoreError: The job failed in the database, the server failed, or it is resting after a failure.
        """
        if time.monotonic() < self._down_until:
            raise StoreError(self.shown, f"failed less than {self.retry_after:g} s ago; not asked again yet")
        try:
            with self._connections().connection() as connection:
                return job(connection, *args)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            self._down_until = time.monotonic() + self.retry_after
            # The pool would reconnect in the background, logging each failure: it is opened again after the rest.
            self.close()
            raise StoreError(self.shown, self._explain(exc)) from None
        except psycopg.Error as exc:  # this call's trouble (a full disk, a lost privilege), not the server's
            raise StoreError(self.shown, self._explain(exc)) from None

    def execute(self, statement: str, values: Params = ()) -> None:
        """Run one statement on a pooled connection, in this thread (`run`'s errors)."""
        self.run(lambda connection: connection.execute(statement, values))

    def fetch_all(self, statement: str, values: Params = ()) -> list[tuple[object, ...]]:
        """The rows one statement returns (a query, or ``... RETURNING``), in this thread (`run`'s errors)."""
        return self.run(lambda connection: connection.execute(statement, values).fetchall())

    def _connections(self) -> psycopg_pool.ConnectionPool[Connection]:
        with self._lock:
            if os.getpid() != self._pid:  # a forked child: the parent's connections are not ours to use
                self._pid, self._pool = os.getpid(), None
            if self._pool is None:
                self._pool = psycopg_pool.ConnectionPool(
                    self._url,
                    min_size=1,
                    max_size=self.max_connections,
                    timeout=self.connect_timeout,
                    kwargs=self._connect_options(),
                    name="rlm-store",
                    open=True,
                )
            return self._pool
