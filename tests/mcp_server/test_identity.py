"""Who is calling, pinned against the installed SDK: an HTTP MCP session is the session the server issued (and
ends with its DELETE), a 2026-07-28 request is a client of its own whatever ``Mcp-Session-Id`` it sends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer

from rlm_adapters.mcp_server.callers import Client as Caller
from rlm_adapters.mcp_server.callers import ClientMiddleware, current_client
from rlm_adapters.mcp_server.transports import BearerTokenMiddleware
from tests.mcp_server.test_http import free_port


class Ended:
    """The keys of the clients that ended, awaitable (the SDK ends a session in its own task)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.changed = asyncio.Event()

    def __call__(self, client: Caller) -> None:
        self.keys.append(client.key)
        self.changed.set()

    async def wait_for(self, count: int) -> list[str]:
        async with asyncio.timeout(10):
            while len(self.keys) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.keys


def whoami_server(ended: Ended) -> MCPServer:
    server: MCPServer = MCPServer("whoami", middleware=[ClientMiddleware()])

    @server.tool()
    def whoami(ctx: Context) -> dict[str, Any]:
        client = current_client(ctx)
        client.on_end(ended)
        return {"key": client.key, "kind": client.kind, "sent": client.sent_session_id}

    return server


@contextlib.asynccontextmanager
async def serving(server: MCPServer, app: Any = None) -> AsyncIterator[str]:
    """`server` over streamable HTTP in this process (so the test sees the server's own objects); `app`: its
    streamable HTTP app wrapped (the server's app is then unused)."""
    port = free_port()
    config = uvicorn.Config(app or server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve())
    try:
        while not http.started:
            assert not task.done(), "uvicorn stopped before it started"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        http.should_exit = True
        await task


async def whoami(url: str, mode: str, headers: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    issued: list[str] = []

    async def seen(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            issued.append(response.headers["mcp-session-id"])

    http = httpx2.AsyncClient(headers=headers or {}, event_hooks={"response": [seen]})
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        answers = [(await client.call_tool("whoami", {})).structured_content for _ in range(2)]
    return [a for a in answers if a is not None], issued


async def test_a_handshake_session_is_the_id_the_server_issued_and_ends_with_its_delete() -> None:
    ended = Ended()
    async with serving(whoami_server(ended)) as url:
        answers, issued = await whoami(url, "legacy")
        assert issued, "the server issued an Mcp-Session-Id"
        key = f"session:{issued[0]}"
        assert answers == [{"key": key, "kind": "session", "sent": None}] * 2
        # The client's DELETE ended the MCP session, and with it the client: both calls' callbacks ran.
        assert await ended.wait_for(2) == [key, key]


async def test_a_2026_request_is_its_own_client_whatever_session_id_it_sends() -> None:
    ended = Ended()
    async with serving(whoami_server(ended)) as url:
        plain, _ = await whoami(url, "auto")
        forged, _ = await whoami(url, "auto", {"Mcp-Session-Id": "0123456789abcdef0123456789abcdef"})
    assert [a["kind"] for a in plain + forged] == ["request"] * 4
    assert len({a["key"] for a in plain + forged}) == 4  # every request a client of its own
    assert [a["sent"] for a in forged] == ["0123456789abcdef0123456789abcdef"] * 2
    assert ended.keys == []  # a request-client never "ends": it owns nothing that outlives it


async def test_an_in_process_client_is_the_local_one() -> None:
    async with Client(whoami_server(Ended())) as client:
        answer = (await client.call_tool("whoami", {})).structured_content
    assert answer == {"key": "local", "kind": "local", "sent": None}


def principal_server() -> MCPServer:
    server: MCPServer = MCPServer("principal", middleware=[ClientMiddleware()])

    @server.tool()
    def principal(ctx: Context) -> dict[str, Any]:
        client = current_client(ctx)
        return {"key": client.key, "principal": client.principal, "durable": client.durable, "fields": repr(client)}

    return server


async def test_the_principal_is_a_checked_token_across_sessions_and_never_the_header_itself() -> None:
    async def ask(url: str, mode: str, headers: dict[str, str]) -> list[dict[str, Any]]:
        http = httpx2.AsyncClient(headers=headers)
        async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            answers = [(await client.call_tool("principal", {})).structured_content for _ in range(2)]
        return [a for a in answers if a is not None]

    server = principal_server()
    checked = BearerTokenMiddleware(server.streamable_http_app(), "alice-secret")
    async with serving(server, app=checked) as url:
        alice = await ask(url, "legacy", {"Authorization": "Bearer alice-secret"})
        alice_again = await ask(url, "auto", {"Authorization": "Bearer alice-secret"})
    assert alice[0]["key"] != alice_again[0]["key"]  # another MCP session (and session-less requests)
    assert {a["principal"] for a in alice + alice_again} == {alice[0]["principal"]}
    assert alice[0]["principal"].startswith("bearer:") and alice[0]["durable"]
    assert not any("secret" in a["fields"] for a in alice + alice_again)


async def test_without_a_token_the_principal_is_the_client_whatever_header_it_sends() -> None:
    """Issue 35, defect 1: an unchecked ``Authorization`` header (or none) made every client one principal."""

    async def ask(url: str, mode: str, headers: dict[str, str]) -> list[dict[str, Any]]:
        http = httpx2.AsyncClient(headers=headers)
        async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            answers = [(await client.call_tool("principal", {})).structured_content for _ in range(2)]
        return [a for a in answers if a is not None]

    async with serving(principal_server()) as url:
        one = await ask(url, "legacy", {})
        two = await ask(url, "legacy", {})
        claimed = await ask(url, "legacy", {"Authorization": "Bearer alice-secret"})
        requests = await ask(url, "auto", {"Authorization": "Bearer alice-secret"})
    for answers in (one, two, claimed):
        assert {a["principal"] for a in answers} == {answers[0]["key"]}  # its MCP session, for both calls
    assert len({a["principal"] for a in one + two + claimed}) == 3
    assert [a["principal"] == a["key"] for a in requests] == [True, True] and requests[0]["key"] != requests[1]["key"]
    assert not any(a["durable"] for a in one + two + claimed + requests)


async def test_the_in_process_principal_is_local() -> None:
    async with Client(principal_server()) as client:
        answer = (await client.call_tool("principal", {})).structured_content
    assert answer is not None and answer["principal"] == "local"
