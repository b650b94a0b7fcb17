"""`rlm_query(..., session=...)`: a persistent REPL per client and session name."""

from __future__ import annotations

from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import turn_of
from tests.mcp_server.conftest import MakeConfig, server_env
from tests.mcp_server.test_http import start_http_server


def _root(messages: list[dict[str, object]]) -> str:
    first = str(messages[1]["content"])
    if "remember" in first:
        return "```repl\nremembered = context.strip()\nFINAL('stored')\n```"
    if "recall" in first:
        return "```repl\nFINAL(repr((remembered, context_0.strip(), context.strip(), len(history_0) > 1)))\n```"
    return "```repl\nFINAL(str('remembered' in globals()))\n```" if turn_of(messages) == 0 else "FINAL(x)"


async def test_a_session_keeps_the_repl_across_calls(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = _root
    server = build_server(make_config())
    async with Client(server) as client:
        first = await client.call_tool("rlm_query", {"query": "remember", "text": "apple", "session": "s1"})
        second = await client.call_tool("rlm_query", {"query": "recall", "text": "pear", "session": "s1"})
        fresh = await client.call_tool("rlm_query", {"query": "check", "text": "x", "session": "other"})
        plain = await client.call_tool("rlm_query", {"query": "check", "text": "x"})
        clash = await client.call_tool("rlm_query", {"query": "recall", "text": "x", "session": "s1", "max_depth": 0})
    assert first.content[0].text == "stored"  # type: ignore[union-attr]
    assert second.content[0].text == "('apple', 'apple', 'pear', True)"  # type: ignore[union-attr]
    assert fresh.content[0].text == "False" and plain.content[0].text == "False"  # type: ignore[union-attr]
    assert clash.is_error and "was opened with" in clash.content[0].text  # type: ignore[union-attr]


async def test_a_bad_session_name_is_refused(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x", "session": "no spaces"})
    assert result.is_error and "session='no spaces'" in result.content[0].text  # type: ignore[union-attr]


async def test_over_http_sessions_are_per_client_or_refused(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = _root
    process, url = start_http_server(workspace, server_env(fake_server, tmp_path / "logs"))
    timeout = httpx2.Timeout(30, read=300)
    try:
        async with (
            httpx2.AsyncClient(timeout=timeout) as http,
            Client(streamable_http_client(url, http_client=http)) as first,
        ):
            stored = await first.call_tool("rlm_query", {"query": "remember", "text": "apple", "session": "s"})
            recalled = await first.call_tool("rlm_query", {"query": "recall", "text": "pear", "session": "s"})
            async with Client(streamable_http_client(url, http_client=http)) as second:
                theirs = await second.call_tool("rlm_query", {"query": "check", "text": "x", "session": "s"})
    finally:
        process.terminate()
        process.wait(10)
        assert process.stderr is not None
        process.stderr.close()
    if stored.is_error:
        # Calls without an Mcp-Session-Id (the 2026-07-28 protocol has none) carry no client identity:
        # a session is refused with a clear message rather than shared between clients.
        message = "`session` needs a stateful connection (stdio, or HTTP with an Mcp-Session-Id)"
        assert stored.content[0].text.endswith(message) and theirs.is_error  # type: ignore[union-attr]
        return
    assert recalled.content[0].text == "('apple', 'apple', 'pear', True)"  # type: ignore[union-attr]
    assert theirs.content[0].text == "False"  # type: ignore[union-attr]
