"""Serving the server: stdio (the default) or streamable HTTP with an optional bearer token."""

from __future__ import annotations

import json
import logging
import threading

from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.http_guard import BearerToken
from rlm_adapters.http_guard import is_loopback as is_loopback  # shared with `rlm serve`
from rlm_adapters.mcp_server.callers import VERIFIED_PRINCIPAL, token_principal
from rlm_adapters.mcp_server.setup.config import ServerConfig

logger = logging.getLogger("rlm_adapters.mcp_server")


class BearerTokenMiddleware(BearerToken):
    """Refuses every HTTP request that does not carry ``Authorization: Bearer <token>`` (`BearerToken`, as
    ``rlm serve``'s), with OAuth's ``unauthorized`` body; a request that passes is marked with the principal
    its token is (`identity`: whoever holds it, in any session).

    Args:
        app: The ASGI app to protect.
        token: The expected token (compared in constant time).
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        principal = token_principal(f"Bearer {token}".encode())
        super().__init__(app, token, _unauthorized, {VERIFIED_PRINCIPAL: principal})


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
    if config.token:
        app = BearerTokenMiddleware(app, config.token)
    return app


def check_exposure(config: ServerConfig) -> str | None:
    """The warning to print for an HTTP server without a token on loopback (None with a token).

    Raises:
        ConfigurationError: no token on a host that is not loopback: whoever reaches it could read the roots.
    """
    if config.token:
        return None
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
