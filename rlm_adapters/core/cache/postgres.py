"""`PostgresCallCache`: the call cache in PostgreSQL, shared by every process that names the same store.

``RLM(cache="postgresql://...")``, ``rlm serve --store`` and ``rlm-mcp --store`` open one. Replicas of a server
on one store share their model replies: a retry that lands on another replica replays what the first had paid
for. The database, its schema and its connections are `PostgresStore`'s; this module is the two queries of the
cache and how a reply is kept: as UTF-8 bytes with surrogates passed, since a reply is any str a provider sent
(PostgreSQL's TEXT refuses NUL).
"""

from __future__ import annotations

import asyncio
import logging

from rlm_adapters.core.cache.base import CachedReply
from rlm_adapters.core.cache.postgres_store import Connection, PostgresStore

logger = logging.getLogger("rlm_adapters.cache")

_SELECT = "SELECT text, input_tokens, output_tokens, model, cost FROM rlm_calls WHERE key = %s"
_INSERT = (
    "INSERT INTO rlm_calls (key, text, model, input_tokens, output_tokens, cost) VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (key) DO NOTHING RETURNING key"
)


class PostgresCallCache:
    """A call cache in a PostgreSQL database (``RLM(cache="postgresql://user@host/db")`` opens one).

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
        self.database = PostgresStore(
            url, connect_timeout=connect_timeout, max_connections=max_connections, retry_after=retry_after
        )
        self.shown = self.database.shown

    def __repr__(self) -> str:
        return f"PostgresCallCache({self.shown!r})"

    async def get(self, key: str) -> CachedReply | None:
        """The reply stored under `key`, or None.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        return await asyncio.to_thread(self.database.run, self._read, key)

    async def put(self, key: str, reply: CachedReply) -> CachedReply:
        """Store `reply` under `key` (unless a reply is stored there already); return the stored one.

        The write finishes even when the caller is cancelled meanwhile: the reply it stores was paid for.

        Raises:
            StoreError: The store failed or is resting after a failure.
        """
        stored = await asyncio.shield(asyncio.to_thread(self.database.run, self._write, key, reply))
        return stored or reply

    def close(self) -> None:
        """Close the store's connections (a later call opens them again)."""
        self.database.close()

    def _read(self, connection: Connection, key: str) -> CachedReply | None:
        row = connection.execute(_SELECT, (key,)).fetchone()
        if row is None:
            return None
        text, input_tokens, output_tokens, model, cost = row
        reply = CachedReply.checked(_text(text), input_tokens, output_tokens, _text(model), cost)
        if reply is None:
            logger.warning("the store %s holds a call this library did not write; it is ignored", self.shown)
        return reply

    def _write(self, connection: Connection, key: str, reply: CachedReply) -> CachedReply:
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
