"""With ``--cache``, ``session=`` names survive a server restart: the first call naming the session after it
runs the session's calls again in a new REPL (every model call from the cache) and finds its variables."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from rlm_adapters.errors import CacheError
from rlm_adapters.mcp_server.sessions.store import SessionStore, store_path
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import server_env
from tests.mcp_server.test_http import TOKEN, connect, served, start_http_server, stop

SET = '```repl\nsecret = 41\nFINAL("set")\n```'
GET = '```repl\ntry:\n    value = secret + 1\nexcept NameError:\n    value = "none"\nFINAL(str(value))\n```'


def root(messages: list[dict[str, Any]]) -> str:
    return SET if "remember" in str(messages[1].get("content", "")) else GET


def stdio(workspace: Path, env: dict[str, str], *extra: str) -> StdioServerParameters:
    args = ["-m", "rlm_adapters.mcp_server", "--root", str(workspace), "--sandbox", "subprocess", *extra]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(workspace))


def text_of(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.slow
async def test_stdio_a_session_is_rebuilt_after_a_restart_from_the_cache(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = root
    env = server_env(fake_server, tmp_path / "logs")
    cache = tmp_path / "calls.sqlite"
    async with Client(stdio(workspace, env, "--cache", str(cache))) as client:
        first = await client.call_tool("rlm_query", {"query": "remember a number", "text": "x", "session": "s"})
        assert text_of(first) == "set"
    assert os.stat(store_path(cache)).st_mode & 0o777 == 0o600
    before = fake_server.counters.requests
    async with Client(stdio(workspace, env, "--cache", str(cache))) as client:  # a new server process
        again = await client.call_tool("rlm_query", {"query": "what was it?", "text": "y", "session": "s"})
    assert text_of(again) == "42"
    assert fake_server.counters.requests - before == 1, "the rebuilt turn replayed; only the new call was sent"
    # Without the cache, a new server has no such session.
    async with Client(stdio(workspace, env)) as client:
        fresh = await client.call_tool("rlm_query", {"query": "what was it?", "text": "y", "session": "s"})
    assert text_of(fresh) == "none"


@pytest.mark.slow
async def test_http_a_session_whose_mcp_session_ended_is_not_rebuilt(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = root
    env = server_env(fake_server, tmp_path / "logs")
    cache = tmp_path / "calls.sqlite"
    flags = ("--token", TOKEN, "--cache", str(cache), "--sandbox", "local")
    process, url = start_http_server(workspace, env, *flags)
    try:
        async with connect(url, mode="legacy", token=TOKEN) as client:  # leaving it ends the MCP session
            assert text_of(await client.call(query="remember a number", text="x", session="s")) == "set"
        held = contextlib.AsyncExitStack()
        client = await held.enter_async_context(connect(url, mode="legacy", token=TOKEN))
        kept = await client.call(query="remember a number", text="x", session="kept")
        # The same call again: its one model call comes from the cache, and the result says so.
        # The fake's model has no price: the line says the cost is unknown, never that it was $0.00.
        unpriced = "not paid again (cost unknown: no price for 'root-model')"
        assert text_of(kept) == f"set\n\n(resumed: 1 of 1 model calls from calls.sqlite, {unpriced})"
        records = json.loads(store_path(cache).read_text())["sessions"]
        assert [r["name"] for r in records] == ["kept"]  # "s" was forgotten when its MCP session ended
        assert records[0]["turns"] == [
            {"query": "remember a number", "paths": None, "text": "x", "output_schema": None}
        ]
        assert records[0]["principal"].startswith("bearer:") and TOKEN not in json.dumps(records)
        # The server stops while "kept" is open: it is kept for a restart (for the same token only).
        await asyncio.to_thread(stop, process)
        with contextlib.suppress(Exception):  # its MCP session cannot be ended: the server is gone
            await held.aclose()
    finally:
        if process.poll() is None:
            stop(process)
    assert [r["name"] for r in json.loads(store_path(cache).read_text())["sessions"]] == ["kept"]
    with served(workspace, env, *flags) as (_process, url):
        async with connect(url, mode="legacy", token=TOKEN) as client:
            rebuilt = await client.call(query="what was it?", text="y", session="kept")
            forgotten = await client.call(query="what was it?", text="y", session="s")
    assert text_of(rebuilt) == "42"
    assert text_of(forgotten) == "none"


@pytest.mark.parametrize(
    ("content", "mode", "reason"),
    [
        ("not json", 0o600, "is not a file rlm-mcp wrote"),
        ('{"format": "rlm-mcp-sessions", "version": 1, "sessions": [{"principal": 1}]}', 0o600, "not an rlm-mcp"),
        ('{"format": "rlm-mcp-sessions", "version": 1, "sessions": []}', 0o666, "could have been written"),
    ],
)
def test_a_sessions_file_that_is_not_ours_is_refused(tmp_path: Path, content: str, mode: int, reason: str) -> None:
    path = tmp_path / "calls.sqlite.sessions.json"
    path.write_text(content)
    path.chmod(mode)
    with pytest.raises(CacheError, match=reason):
        SessionStore(path)
    assert path.read_text() == content


def test_a_linked_sessions_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"format": "rlm-mcp-sessions", "version": 1, "sessions": []}')
    (tmp_path / "calls.sqlite.sessions.json").symlink_to(target)
    with pytest.raises(CacheError, match="not a regular file"):
        SessionStore(tmp_path / "calls.sqlite.sessions.json")


def test_two_servers_sharing_a_cache_keep_each_others_sessions(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite.sessions.json"
    one, two = SessionStore(path), SessionStore(path)
    one.record("local", "local", "a", {"model": None}, [{"query": "q1", "paths": None, "text": "x"}])
    two.record("local", "local", "b", {"model": None}, [{"query": "q2", "paths": None, "text": "y"}])
    one.record("local", "local", "a", {"model": None}, [{"query": "q1", "paths": None, "text": "x"}] * 2)
    restarted = SessionStore(path)
    assert len(restarted.claim("local", "a", {"model": None})) == 2
    assert restarted.claim("local", "b", {"model": None}) == [{"query": "q2", "paths": None, "text": "y"}]
    assert restarted.claim("local", "b", {"model": None}) == [], "a record is replayed once"
    assert {r["name"] for r in json.loads(path.read_text())["sessions"]} == set()  # both taken over


def test_a_session_idle_longer_than_the_limit_is_not_restored(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite.sessions.json"
    now = [1000.0]
    SessionStore(path, 60, clock=lambda: now[0]).record("local", "local", "a", {}, [{"query": "q"}])
    now[0] += 61
    assert SessionStore(path, 60, clock=lambda: now[0]).claim("local", "a", {}) == []
