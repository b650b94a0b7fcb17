"""Persistent sessions for MCP clients: ``rlm_query(..., session="name")`` keeps one REPL per client and name.

Later calls of the same session see the variables of earlier ones, each call's inputs as ``context_1``, ...,
and the earlier conversations as ``history_0``, ... . A session belongs to the client that opened it
(`identity.Client`: over stdio the one client, over HTTP the MCP session the server issued; a session-less
request cannot keep one) and keeps the options of its first call. With ``--cache`` a durable principal's
sessions (stdio's, a token's) are written down and restored after a restart to that principal only; without a
token over HTTP, none is written down or handed out. It is closed when its client's MCP session
ends, after ``--session-idle`` seconds without a call, ``--session-lifetime`` seconds after it opened (a call in
flight finishes first), or to make room among its own client's idle sessions; a client at its quota with every
session busy, or a server at ``--max-sessions``, is refused with the limit named. The pool is
`core.pool.SessionPool`, the same that keeps `ChatRLM`'s persistent threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

from rlm_adapters.errors import QueryError
from rlm_adapters.hosting import CloseReason, PoolLimits, SessionPool
from rlm_adapters.mcp_server.callers import Client
from rlm_adapters.mcp_server.sessions.store import SessionStore

logger = logging.getLogger("rlm_adapters.mcp_server")
# Runs a session's recorded calls again in its new RLM.
Restore = Callable[["RLM", list[dict[str, Any]]], Awaitable[None]]

if TYPE_CHECKING:  # the engine loads at the first rlm_query, not at start-up; psycopg only for a --store
    from rlm_adapters.core import RLM
    from rlm_adapters.mcp_server.sessions.shared_store import SharedSessionStore

_NAME = re.compile(r"^[\w.-]{1,64}$")
# How the refusals spell each limit: the server's flags.
FLAG_NAMES = {
    "max_sessions": "--max-sessions",
    "max_per_owner": "--max-client-sessions",
    "idle_timeout": "--session-idle",
    "max_lifetime": "--session-lifetime",
}


def share_of(limits: PoolLimits) -> PoolLimits:
    """`limits` where principals are many: a client's quota is at most half of the server's cap (rounded up)."""
    share = (limits.max_sessions + 1) // 2
    if limits.max_per_owner <= share:
        return limits
    # Refusals then read "(--max-sessions/2=3)": the share a client is held to, and why.
    names = {**limits.names, "max_per_owner": f"{limits.name('max_sessions')}/2"}
    return dataclasses.replace(limits, max_per_owner=share, names=names)


class MCPSessions:
    """The open sessions of one server, by client and name.

    Args:
        limits: The pool's caps and timeouts (the server's ``--max-sessions``, ... flags).
        store: Where sessions are written down to survive a restart (``--cache``), or the records replicas on a
            ``--store`` share, naming the replica holding each (`shared_store.SharedSessionStore`).
        stopping: Set when the server begins to stop (`transports.http_app` sets it at the ASGI lifespan's
            shutdown): clients it ends from then on keep their sessions in the store for the restart.
        shared: Principals are many and cost nothing to make (HTTP without a token, where each MCP session is
            one): each holds at most half of ``--max-sessions`` (rounded up), as `runs.RunBook` does with
            ``--max-runs``, so that one client's flood of sessions leaves room for the others.
    """

    def __init__(
        self,
        limits: PoolLimits,
        store: SessionStore | SharedSessionStore | None = None,
        stopping: threading.Event | None = None,
        *,
        shared: bool = False,
    ) -> None:
        self.pool: SessionPool[RLM] = SessionPool(share_of(limits) if shared else limits, what="session")
        self._watched: set[str] = set()
        self.store = store
        # Set once the server begins to stop: the MCP sessions it ends then did not end their REPLs for good.
        self.stopping = stopping or threading.Event()
        if store is not None:
            self.pool.add_listener(self._closed)

    @contextlib.asynccontextmanager
    async def lease(
        self,
        client: Client,
        name: str,
        options: dict[str, Any],
        build: Callable[[], RLM],
        turn: dict[str, Any] | None = None,
        restore: Restore | None = None,
    ) -> AsyncIterator[RLM]:
        """The session's persistent `RLM` for one call, built by `build` on its first call; with a store,
        `turn` (the call's arguments) is written down, and a session a restart found is rebuilt by `restore`.

        Raises:
            QueryError: a bad name, or a client that cannot keep a session.
            SessionElsewhere: with a shared store, another replica holds the session (a `QueryError`).
            ConfigurationError: options that differ from the session's first call.
            SessionLimitError: the client's quota or the server's cap is reached and nothing is idle.
        """
        if not _NAME.match(name):
            raise QueryError(f"session={name!r}: use 1-64 letters, digits, '.', '_' or '-'")
        client.require_session(name)
        if client.key not in self._watched:
            self._watched.add(client.key)
            client.on_end(self._ended)
        built: list[bool] = []
        taken: list[dict[str, Any]] | None = None
        shared = self.store is not None and not isinstance(self.store, SessionStore)
        if shared and client.durable and name not in self.pool.names(client.key):
            # Before a sandbox is built: a session another replica holds is refused, and nothing is made here.
            assert self.store is not None
            taken = await asyncio.to_thread(self.store.claim, client.principal, name, options)

        def building() -> RLM:
            built.append(True)
            return build()

        async with self.pool.alease(client.key, name, building, options=options) as rlm:
            if client.ended:  # its MCP session ended while this one was being opened
                self.pool.close_owner(client.key)
                client.require_session(name)
            # Only a durable principal's session is restored or written down: without a token over HTTP,
            # nobody after a restart is the client that made it, so it is handed to nobody.
            if built and self.store is not None and client.durable:
                await self._rebuild(client, name, options, rlm, restore, taken)
            done = False
            try:
                yield rlm
                done = True
            finally:
                if self.store is not None and turn is not None and client.durable:
                    # Shielded: a call cancelled now still leaves its session written down as it stands.
                    await asyncio.shield(self._write_down(client, name, options, rlm, turn if done else None))

    async def _rebuild(
        self,
        client: Client,
        name: str,
        options: dict[str, Any],
        rlm: RLM,
        restore: Restore | None,
        taken: list[dict[str, Any]] | None,
    ) -> None:
        """A new session's REPL: when a restart found it (or this replica took it over from a lost one), run
        its calls again (from the cache, for nothing). `taken`: the calls its claim returned already."""
        assert self.store is not None
        store = self.store
        # The file is rewritten whole, with a lock across processes: never on the event loop.
        turns = taken if taken is not None else await asyncio.to_thread(store.claim, client.principal, name, options)
        if turns and restore is not None:
            try:
                await restore(rlm, turns)
            except Exception as exc:  # a file gone since, say: the session starts empty rather than half made
                logger.warning("session %r could not be rebuilt after the restart (%s); it starts empty", name, exc)
                await rlm.aclose()
                turns = []
        await asyncio.to_thread(store.record, client.key, client.principal, name, options, turns)

    async def _write_down(
        self, client: Client, name: str, options: dict[str, Any], rlm: RLM, turn: dict[str, Any] | None
    ) -> None:
        """After a call: the session stands on the calls its REPL kept (`Session.turns`), this one among them."""
        assert self.store is not None
        session = rlm.session
        kept = len(session.turns) if session is not None and not session.closed else 0
        calls = self.store.turns(client.key, name) + ([turn] if turn is not None else [])
        await asyncio.to_thread(
            self.store.record, client.key, client.principal, name, options, calls[-kept:] if kept else []
        )

    def _closed(self, owner: str, name: Hashable, reason: CloseReason) -> None:
        if self.store is not None and reason != "closed":  # a server stopping keeps its sessions for the restart
            self.store.forget(owner, str(name))

    def _ended(self, client: Client) -> None:
        self._watched.discard(client.key)
        self.pool.close_owner(client.key, "closed" if self.stopping.is_set() else "owner_ended")

    async def aclose(self) -> None:
        """Close every session."""
        await self.pool.aclose()
