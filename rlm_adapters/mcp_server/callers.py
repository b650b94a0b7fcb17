"""Who is calling: the client that persistent sessions and trajectories belong to, and the principal that owns
what may outlive one MCP session (background runs, MCP tasks, ``session=`` records kept for a restart).

What identity each transport has (see docs/mcp.md):

- **stdio** (and an in-process client): the one client of the process, the user who started it (``local``).
  It is the principal too: a later stdio server of the same user with the same ``--cache`` reaches its runs.
- **HTTP, handshake era** (protocol up to 2025-11-25): the MCP session the server issued at ``initialize``
  (``session``). The SDK's session manager routes a request to a session only by an id it issued and has not
  closed (else it answers 404), so the connection serving the request *is* that session; a raw
  ``Mcp-Session-Id`` header is never read. When the MCP session ends (the client's DELETE, its idle expiry,
  the server stopping) the callbacks given to `Client.on_end` run.
- **HTTP, 2026-07-28**: a request carries no MCP session (the SDK serves it on its session-less path and never
  checks an ``Mcp-Session-Id`` it may send), so it is a client of its own (``request``): it cannot keep a
  persistent session.

Over HTTP the principal is what the server *verified*, nothing a client merely sends: with ``--token``,
`transports.BearerTokenMiddleware` has checked the ``Authorization`` header and marks the request with
`token_principal` (a digest of it), so every holder of the token is one principal, in any MCP session and
across restarts. With a PostgreSQL ``--store``, each key of the store (``rlm keys add``) is accepted too and is
its own principal, ``key:NAME`` (`key_principal`): its runs and tasks are visible to it alone. Without
``--token`` no header is checked, so none is an identity (any local process could send any): the principal is
the client itself, its MCP session (or its one request), and what it owns ends with it. `Client.durable` says
which: only a durable principal's state is written down for a restart.

An owner of state asks `identify` and keys it by `Client.key`; `on_end` tells it when the client is gone.
State that may outlive an MCP session (background runs, tasks) is keyed by `Client.principal` instead.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context

from rlm_adapters.errors import QueryError

if TYPE_CHECKING:
    from rlm_adapters.core.cache import KeyStanding

logger = logging.getLogger("rlm_adapters.mcp_server")

ClientKind = Literal["local", "session", "request"]
SESSION_HEADER = "mcp-session-id"
# The ASGI scope key under which `transports.BearerTokenMiddleware` puts the principal of a checked token.
VERIFIED_PRINCIPAL = "rlm_adapters.verified_principal"
# The ASGI scope key under which it puts the store's key a request carried (`core.cache.KeyStanding`).
VERIFIED_KEY = "rlm_adapters.verified_key"
_STATE_KEY = "rlm_adapters.client"
# The client of the request being served, set by `ClientMiddleware` around each request's handler (static
# resources get no `Context` from the SDK, so this is how they learn who asks).
_CURRENT: contextvars.ContextVar[Client | None] = contextvars.ContextVar("rlm_mcp_client", default=None)


@dataclass(eq=False)
class Client:
    """One client of the server.

    Attributes:
        key: Stable for the client's life, unique in the server (``local``, ``session:<id>``, ``request:<id>``).
        kind: ``local`` (stdio, in-process), ``session`` (an HTTP MCP session), ``request`` (one
            session-less HTTP request).
        sent_session_id: The ``Mcp-Session-Id`` a session-less request sent anyway (never trusted).
        principal: Who owns what the client starts: ``local`` (stdio, in-process), over HTTP with ``--token``
            ``bearer:<digest of the checked Authorization header>``, else the client's own `key`.
        durable: The principal outlives the client (``local``, or a checked token): its runs are reached from
            its other MCP sessions and it may be written down for a restart. Not durable, what it owns ends
            with its MCP session.
        ended: The client is gone (its MCP session ended); set before the `on_end` callbacks run.
        store_key: The store's key the client presented (its principal is ``key:NAME``), or None.
    """

    key: str
    kind: ClientKind
    sent_session_id: str | None = None
    principal: str = "local"
    durable: bool = True
    ended: bool = False
    store_key: KeyStanding | None = None
    _on_end: list[Callable[[Client], Awaitable[None] | None]] = field(default_factory=list, repr=False)

    def on_end(self, callback: Callable[[Client], Awaitable[None] | None]) -> None:
        """Run ``callback(client)`` when the client ends (only an MCP session ends before the server)."""
        if self.kind == "session":
            self._on_end.append(callback)

    async def _end(self) -> None:
        self.ended = True
        for callback in self._on_end:
            try:
                outcome = callback(self)
                if outcome is not None:
                    await outcome
            except Exception:  # one owner's cleanup failing must not keep the others'
                logger.exception("cleanup for the ended client %s failed", self.key)

    def require_session(self, name: str) -> None:
        """Refuse ``session=name`` for a client that cannot keep one.

        Raises:
            QueryError: a session-less HTTP request (naming the ``Mcp-Session-Id`` it sent, if any), or a
                client whose MCP session has ended.
        """
        if self.ended:
            raise QueryError(f"session={name!r}: this MCP session has ended; connect again to open a new one")
        if self.kind != "request":
            return
        if self.sent_session_id is not None:
            raise QueryError(
                f"session={name!r}: Mcp-Session-Id {self.sent_session_id[:64]!r} is not a session of this "
                "connection (a 2026-07-28 request has none, so the header is ignored); connect with the "
                "initialize handshake (protocol 2025-11-25) to keep a session, or use stdio"
            )
        raise QueryError(
            f"session={name!r} needs an MCP session: use stdio, or HTTP with the initialize handshake "
            "(protocol 2025-11-25); a 2026-07-28 request carries none"
        )

    def require_background(self) -> None:
        """Refuse a background run (or an MCP task) that its client could never reach again.

        Raises:
            QueryError: a session-less HTTP request without a checked token: the next request is another
                client, so the run's result would be nobody's.
        """
        if self.kind == "request" and not self.durable:
            raise QueryError(
                "background=true needs a client the server knows again: connect with the initialize handshake "
                "(protocol 2025-11-25, an MCP session), use stdio, or start the server with --token "
                "(a 2026-07-28 request without a token is a new client each time)"
            )


def token_principal(authorization: bytes) -> str:
    """The principal of a checked ``Authorization`` header: a digest of it (the header is kept nowhere)."""
    return "bearer:" + hashlib.sha256(authorization).hexdigest()[:32]


def key_principal(name: str) -> str:
    """The principal of the store's key `name` (stable across its requests, sessions and the replicas)."""
    return f"key:{name}"


def identify(rctx: ServerRequestContext[Any, Any]) -> Client:
    """The client of the request `rctx` serves (the same object for every request of one MCP session)."""
    if rctx.request is None:
        return Client("local", "local")  # stdio and in-process: one client, the user, for the server's life
    connection = _connection_of(rctx)
    session_id = connection.session_id if connection is not None else None
    headers = getattr(rctx.request, "headers", None)
    verified = _verified_principal(rctx.request)
    key = _verified_key(rctx.request)
    if connection is None or session_id is None:
        sent = headers.get(SESSION_HEADER) if headers is not None else None
        return _client(f"request:{uuid.uuid4().hex}", "request", verified, sent_session_id=sent, store_key=key)
    known = connection.state.get(_STATE_KEY)
    if isinstance(known, Client):
        return known
    client = _client(f"session:{session_id}", "session", verified, store_key=key)
    connection.state[_STATE_KEY] = client
    # The connection's exit stack unwinds when its MCP session ends, however it ends.
    connection.exit_stack.push_async_callback(client._end)
    return client


def current_client(ctx: Context[Any, Any] | None = None) -> Client:
    """The client of the request being served (from `ClientMiddleware`; else identified from `ctx`)."""
    client = _CURRENT.get()
    if client is not None:
        return client
    if ctx is None:
        raise RuntimeError("current_client() outside a request served behind ClientMiddleware")
    return identify(ctx.request_context)


class ClientMiddleware:
    """SDK middleware: identifies the client of every request, for the handlers that run inside it."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        token = _CURRENT.set(identify(ctx))
        try:
            return await call_next(ctx)
        finally:
            _CURRENT.reset(token)


def _client(
    key: str,
    kind: ClientKind,
    verified: str | None,
    sent_session_id: str | None = None,
    *,
    store_key: KeyStanding | None = None,
) -> Client:
    """An HTTP client: the checked token's (or store key's) principal, else its own key (then nothing outlives it)."""
    principal = key if verified is None else verified
    return Client(
        key,
        kind,
        sent_session_id=sent_session_id,
        principal=principal,
        durable=verified is not None,
        store_key=store_key,
    )


def _verified_principal(request: Any) -> str | None:
    """The principal `transports.BearerTokenMiddleware` put in the request's ASGI scope (None without
    ``--token``: an ``Authorization`` header nobody checked is no identity)."""
    scope = getattr(request, "scope", None)
    found = scope.get(VERIFIED_PRINCIPAL) if isinstance(scope, dict) else None
    return found if isinstance(found, str) and found.startswith(("bearer:", "key:")) else None


def _verified_key(request: Any) -> KeyStanding | None:
    """The store's key `transports.BearerTokenMiddleware` found for the request (None: none)."""
    scope = getattr(request, "scope", None)
    return scope.get(VERIFIED_KEY) if isinstance(scope, dict) else None


def _connection_of(rctx: ServerRequestContext[Any, Any]) -> Connection | None:
    """The `Connection` serving `rctx`'s request.

    The SDK's request context does not expose it (its lowlevel `Context` does, but is not the one handlers
    and middleware get), so it is read from the request's `ServerSession`; `tests/mcp_server/test_identity.py`
    pins this against the installed SDK. Missing, the request counts as session-less: nothing is trusted.
    """
    connection = getattr(rctx.session, "_connection", None)
    return connection if isinstance(connection, Connection) else None


__all__ = [
    "VERIFIED_KEY",
    "VERIFIED_PRINCIPAL",
    "Client",
    "ClientKind",
    "ClientMiddleware",
    "current_client",
    "identify",
    "key_principal",
    "token_principal",
]
