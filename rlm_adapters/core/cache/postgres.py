"""`PostgresCallCache`: the call cache in PostgreSQL, shared by every process that names the same store.

``RLM(cache="postgresql://...")``, ``rlm serve --store`` and ``rlm-mcp --store`` open one. Replicas of a server
on one store share their model replies: a retry that lands on another replica replays what the first had paid
for. Opening the store connects once, at once, and brings its schema up to date (`postgres_schema.migrate`), so
an unreachable server, a wrong password, a missing database or a newer schema is one `StoreError` at start,
naming the URL without its password and what to check.

Later calls go through a pool of connections (psycopg_pool) owned by the store object, opened at its first call
and closed by `close` (a later call opens it again; a forked child opens its own). The pool is the synchronous
one, used from worker threads: the engine calls a store from several event loops (a run's, a session's, a
server's), and an async pool belongs to the one loop that opened it. A store that goes away mid-run fails the
call that met it, then every call for `retry_after` seconds without waiting on the network (its pool is closed
meanwhile), so a run goes on uncached at full speed (`RunCalls` logs the first failure once) and a store back up
is used again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Callable

import psycopg
import psycopg_pool

from rlm_adapters.core.cache.base import CachedReply
from rlm_adapters.core.cache.postgres_schema import LATEST, NewerSchemaError, migrate
from rlm_adapters.core.cache.store_url import is_postgres, shown_url, url_password
from rlm_adapters.errors import StoreError

logger = logging.getLogger("rlm_adapters.cache")

_SELECT = "SELECT text, input_tokens, output_tokens, model, cost FROM rlm_calls WHERE key = %s"
_INSERT = (
    "INSERT INTO rlm_calls (key, text, model, input_tokens, output_tokens, cost) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (key) DO NOTHING RETURNING key"
)


class PostgresCallCache:
    """A call cache in a PostgreSQL database (``RLM(cache="postgresql://user:pw@host/db")`` opens one).

    Args:
        url: A libpq URL (``postgresql://`` or ``postgres://``); the database must exist, and its tables are
            created (or brought up to date) when the store opens.
        connect_timeout: Seconds a connection may take, and a call may wait for a free one.
        max_connections: Connections the pool keeps open at most.
        retry_after: Seconds the store is not asked again after it failed (a call meanwhile fails at once).

    Raises:
        StoreError: when the store cannot be reached or used, naming the URL without its password and why.
    """

    def __init__(
        self, url: str, *, connect_timeout: float = 10.0, max_connections: int = 8, retry_after: float = 10.0
    ) -> None:
        if not is_postgres(url):
            raise StoreError(shown_url(url), "is not a postgresql:// URL")
        self.url = url
        self.shown = shown_url(url)
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self.retry_after = retry_after
        self._lock = threading.Lock()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[tuple[object, ...]]] | None = None
        self._pid = os.getpid()
        self._down_until = 0.0
        self._open()

    def __repr__(self) -> str:
        return f"PostgresCallCache({self.shown!r})"

    def _connect_options(self) -> dict[str, object]:
        return {"connect_timeout": max(1, round(self.connect_timeout)), "autocommit": True}

    def _open(self) -> None:
        try:
            with psycopg.connect(self.url, **self._connect_options()) as connection:  # type: ignore[arg-type]
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
        secret = url_password(self.url)
        if secret:
            text = text.replace(secret, "***")
        lowered = text.lower()
        parts = urllib.parse.urlsplit(self.url)
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
        if "permission denied" in lowered:
            return f"refused this user a table ({text}): grant it CREATE on the database, or name another"
        return f"failed ({text})"

    async def get(self, key: str) -> CachedReply | None:
        """The reply stored under `key`, or None.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        return await asyncio.to_thread(self._run, self._read, key)

    async def put(self, key: str, reply: CachedReply) -> CachedReply:
        """Store `reply` under `key` (unless a reply is stored there already); return the stored one.

        The write finishes even when the caller is cancelled meanwhile: the reply it stores was paid for.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        stored = await asyncio.shield(asyncio.to_thread(self._run, self._write, key, reply))
        return stored or reply

    def close(self) -> None:
        """Close the pool's connections (a later call opens a new pool)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()

    def _run(self, job: Callable[..., CachedReply | None], *args: object) -> CachedReply | None:
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

    def _connections(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[tuple[object, ...]]]:
        with self._lock:
            if os.getpid() != self._pid:  # a forked child: the parent's connections are not ours to use
                self._pid, self._pool = os.getpid(), None
            if self._pool is None:
                self._pool = psycopg_pool.ConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=self.max_connections,
                    timeout=self.connect_timeout,
                    kwargs=self._connect_options(),
                    name="rlm-call-cache",
                    open=True,
                )
            return self._pool

    def _read(self, connection: psycopg.Connection[tuple[object, ...]], key: str) -> CachedReply | None:
        row = connection.execute(_SELECT, (key,)).fetchone()
        if row is None:
            return None
        text, input_tokens, output_tokens, model, cost = row
        reply = CachedReply.checked(_text(text), input_tokens, output_tokens, _text(model), cost)
        if reply is None:
            logger.warning("the store %s holds a call this library did not write; it is ignored", self.shown)
        return reply

    def _write(self, connection: psycopg.Connection[tuple[object, ...]], key: str, reply: CachedReply) -> CachedReply:
        values = (key, _bytes(reply.text), _bytes(reply.model), reply.input_tokens, reply.output_tokens, reply.cost)
        if connection.execute(_INSERT, values).fetchone() is not None:
            return reply
        # Another process stored a reply under this key first: that one is what every run replays.
        return self._read(connection, key) or reply


# A reply is any str a provider sent: NUL (which PostgreSQL's TEXT refuses) and lone surrogates included.
def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _text(value: object) -> object:
    """Stored bytes as the str they were; anything else as it is (`CachedReply.checked` refuses it)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
    return value
