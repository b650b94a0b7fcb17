"""Persistent sessions for MCP clients: ``rlm_query(..., session="name")`` keeps one REPL per client and name.

Later calls of the same session see the variables of earlier ones, each call's inputs as ``context_1``, ...,
and the earlier conversations as ``history_0``, ... . A session belongs to the client that opened it
(`identity.Client`: over stdio the one client, over HTTP the MCP session the server issued; a session-less
request cannot keep one) and keeps the options of its first call. It is closed when its client's MCP session
ends, after ``--session-idle`` seconds without a call, ``--session-lifetime`` seconds after it opened (a call in
flight finishes first), or to make room among its own client's idle sessions; a client at its quota with every
session busy, or a server at ``--max-sessions``, is refused with the limit named. The pool is
`core.pool.SessionPool`, the same that keeps `ChatRLM`'s persistent threads.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.pool import PoolLimits, SessionPool
from rlm_adapters.errors import QueryError
from rlm_adapters.mcp_server.identity import Client

if TYPE_CHECKING:  # the engine loads at the first rlm_query, not at start-up
    from rlm_adapters.core.rlm import RLM

_NAME = re.compile(r"^[\w.-]{1,64}$")
# How the refusals spell each limit: the server's flags.
FLAG_NAMES = {
    "max_sessions": "--max-sessions",
    "max_per_owner": "--max-client-sessions",
    "idle_timeout": "--session-idle",
    "max_lifetime": "--session-lifetime",
}


class MCPSessions:
    """The open sessions of one server, by client and name.

    Args:
        limits: The pool's caps and timeouts (the server's ``--max-sessions``, ... flags).
    """

    def __init__(self, limits: PoolLimits) -> None:
        self.pool: SessionPool[RLM] = SessionPool(limits, what="session")
        self._watched: set[str] = set()

    @contextlib.asynccontextmanager
    async def lease(
        self, client: Client, name: str, options: dict[str, Any], build: Callable[[], RLM]
    ) -> AsyncIterator[RLM]:
        """The session's persistent `RLM` for one call, built by `build` on its first call.

        Raises:
            QueryError: a bad name, or a client that cannot keep a session.
            ConfigurationError: options that differ from the session's first call.
            SessionLimitError: the client's quota or the server's cap is reached and nothing is idle.
        """
        if not _NAME.match(name):
            raise QueryError(f"session={name!r}: use 1-64 letters, digits, '.', '_' or '-'")
        client.require_session(name)
        if client.key not in self._watched:
            self._watched.add(client.key)
            client.on_end(self._ended)
        async with self.pool.alease(client.key, name, build, options=options) as rlm:
            if client.ended:  # its MCP session ended while this one was being opened
                self.pool.close_owner(client.key)
                client.require_session(name)
            yield rlm

    def _ended(self, client: Client) -> None:
        self._watched.discard(client.key)
        self.pool.close_owner(client.key)

    async def aclose(self) -> None:
        """Close every session."""
        await self.pool.aclose()
