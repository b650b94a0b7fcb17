"""Serving the server: stdio (the default) or streamable HTTP with an optional bearer token."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlm_adapters.core.cache import KEY_PREFIX, is_postgres
from rlm_adapters.errors import ConfigurationError, StoreError
from rlm_adapters.http_guard import BearerKeys, BearerToken, KeyLookupFailed
from rlm_adapters.http_guard import is_loopback as is_loopback  # shared with `rlm serve`
from rlm_adapters.mcp_server.callers import VERIFIED_KEY, VERIFIED_PRINCIPAL, key_principal, token_principal
from rlm_adapters.mcp_server.setup.config import ServerConfig

logger = logging.getLogger("rlm_adapters.mcp_server")


class BearerTokenMiddleware(BearerToken):
    """Refuses every HTTP request that does not carry ``Authorization: Bearer <token>`` (`BearerToken`, as
    ``rlm serve``'s), with OAuth's ``unauthorized`` body; a request that passes is marked with the principal
    its token is (`identity`: whoever holds it, in any session).

    Args:
        app: The ASGI app to protect.
        token: The expected token (compared in constant time), or None when only `keys` are accepted.
        keys: A PostgreSQL store's keys (`store_bearer_keys`), each its own principal (``key:NAME``), or None.
    """

    def __init__(self, app: ASGIApp, token: str | None, keys: BearerKeys | None = None) -> None:
        extra = {VERIFIED_PRINCIPAL: token_principal(f"Bearer {token}".encode())} if token else None
        super().__init__(app, token, _unauthorized, extra, keys)


async def _unauthorized(send: Send, presented: bool) -> None:
    body = json.dumps({"error": "unauthorized", "error_description": "a valid bearer token is required"})
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="rlm-mcp"')],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})


class ShutdownNotice:
    """Sets `stopping` when the ASGI server begins its shutdown, before the SDK ends the MCP sessions.

    Args:
        app: The ASGI app.
        stopping: The event to set.
    """

    def __init__(self, app: ASGIApp, stopping: threading.Event) -> None:
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def noticing() -> Message:
            message = await receive()
            if message.get("type") == "lifespan.shutdown":
                self.stopping.set()
            return message

        await self.app(scope, noticing, send)


def http_app(server: MCPServer, config: ServerConfig, stopping: threading.Event | None = None) -> ASGIApp:
    """The streamable HTTP app (endpoint ``/mcp``), behind the bearer check when a token is set (`stopping`:
    set when the server begins to stop, see `ShutdownNotice`)."""
    app: ASGIApp = server.streamable_http_app(host=config.host)
    if stopping is not None:
        app = ShutdownNotice(app, stopping)
    keys = store_bearer_keys(config)
    if config.token or keys is not None:
        app = BearerTokenMiddleware(app, config.token, keys)
    return app


def store_bearer_keys(config: ServerConfig) -> BearerKeys | None:
    """The keys of ``--store``'s PostgreSQL database as bearer tokens (None without one). A request with a key
    is the key's principal; on loopback without a token, any other request passes as before."""
    if config.store is None or not is_postgres(config.store):
        return None
    from rlm_adapters.core.cache import KeyStore, PostgresStore  # psycopg: with a PostgreSQL store only

    keys = KeyStore(PostgresStore(config.store, max_connections=2))

    async def find(secret: str) -> dict[str, Any] | None:
        try:
            standing = await asyncio.to_thread(keys.lookup, secret)
        except StoreError as exc:
            raise KeyLookupFailed(str(exc)) from None
        if standing is None:
            return None
        return {VERIFIED_PRINCIPAL: key_principal(standing.name), VERIFIED_KEY: standing}

    anonymous = config.token is None and is_loopback(config.host)
    return BearerKeys(find, KEY_PREFIX, anonymous, _store_unavailable)


async def _store_unavailable(send: Send, reason: str) -> None:
    body = json.dumps(
        {"error": "temporarily_unavailable", "error_description": f"the keys cannot be checked: {reason}"}
    )
    await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body.encode()})


def check_exposure(config: ServerConfig) -> str | None:
    """The warning to print for an HTTP server without a token on loopback (None with a token).

    Raises:
        ConfigurationError: no token on a host that is not loopback: whoever reaches it could read the roots.
    """
    if config.token:
        return None
    keyed = config.store is not None and is_postgres(config.store)
    if keyed and not is_loopback(config.host):
        return None  # every request needs one of the store's keys
    if not is_loopback(config.host):
        raise ConfigurationError(
            f"--host {config.host!r} is not loopback: set a token (--token-file FILE or RLM_MCP_TOKEN), or every "
            "machine that reaches the port can read the --root folders"
        )
    return (
        f"serving on {config.host} without a token: any local process can call it and read the --root folders "
        "(set --token-file FILE or RLM_MCP_TOKEN)"
    )


async def serve_http(server: MCPServer, config: ServerConfig, stopping: threading.Event | None = None) -> None:
    """Serve streamable HTTP on ``config.host:config.port`` until cancelled (`stopping`: see `http_app`).

    Raises:
        ConfigurationError: no token on a host that is not loopback (see `check_exposure`).
    """
    import uvicorn

    warning = check_exposure(config)
    if warning is not None:
        logger.warning(warning)
    app = http_app(server, config, stopping)
    uv_config = uvicorn.Config(app, host=config.host, port=config.port, log_level="warning")
    logger.info("rlm-mcp serving streamable HTTP on http://%s:%d/mcp", config.host, config.port)
    await uvicorn.Server(uv_config).serve()


async def serve_stdio(server: MCPServer) -> None:
    """Serve over stdin/stdout until the client closes them."""
    await server.run_stdio_async()
