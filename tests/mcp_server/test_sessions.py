"""`rlm_query(..., session=...)`: a persistent REPL per client and session name.

Over HTTP a session belongs to the MCP session the server issued (issue 24, defect 4: a made-up or reused
``Mcp-Session-Id`` reached a REPL), closes with it, and is never evicted by another client nor while a call
is in flight (defect 5); idle sessions close on a timer, their processes gone (defect 12).
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.setup.config import session_limits
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import turn_of
from tests.mcp_server.conftest import MakeConfig, server_env
from tests.mcp_server.test_cancel import descendants
from tests.mcp_server.test_http import Connection, connect, served

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts processes through /proc")


def _root(messages: list[dict[str, object]]) -> str:
    first = str(messages[1]["content"])
    if "hold" in first:
        # A call that stays in flight until the test lets it go (the local sandbox runs in the server).
        started, go = re.findall(r"hold (\S+) (\S+)", first)[0]
        return (
            f"```repl\nimport os, time\nremembered = context.strip()\nopen({started!r}, 'w').close()\n"
            f"while not os.path.exists({go!r}):\n    time.sleep(0.02)\nFINAL('held')\n```"
        )
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


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def _until(condition: Any, what: str, timeout: float = 30.0) -> None:
    """Wait for something another process does (nothing to await): check it until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def _hold(conn: Connection, tmp_path: Path) -> tuple[asyncio.Task[Any], Path]:
    """Start a call of session "a" that stays in flight until the file returned is made."""
    started, go = tmp_path / "started", tmp_path / "go"
    held = asyncio.create_task(conn.call(query=f"hold {started} {go}", text="apple", session="a"))
    await _until(started.exists, "the held call did not start")
    return held, go


@pytest.fixture
def local_url(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> Iterator[str]:
    """An HTTP server with the local sandbox, playing `_root`."""
    fake_server.root = _root
    with served(workspace, server_env(fake_server, tmp_path / "logs"), "--sandbox", "local") as (_, url):
        yield url


async def test_over_http_a_session_belongs_to_the_mcp_session_the_server_issued(local_url: str) -> None:
    async with connect(local_url, mode="legacy") as first, connect(local_url, mode="legacy") as second:
        await first.call(query="remember", text="apple", session="s")
        recalled = await first.call(query="recall", text="pear", session="s")
        theirs = await second.call(query="check", text="x", session="s")
    async with connect(local_url) as modern:  # 2026-07-28: no MCP session, so no persistent one
        refused = await modern.call(query="remember", text="apple", session="s")
    assert _text(recalled) == "('apple', 'apple', 'pear', True)"
    assert _text(theirs) == "False"
    assert refused.is_error
    assert _text(refused).endswith(
        "session='s' needs an MCP session: use stdio, or HTTP with the initialize handshake "
        "(protocol 2025-11-25); a 2026-07-28 request carries none"
    )


async def test_a_made_up_session_id_opens_no_session(local_url: str) -> None:
    """Issue 24, defect 4: a 2026-07-28 request with an invented Mcp-Session-Id opened a persistent session."""
    async with connect(local_url, headers={"Mcp-Session-Id": "made-up"}) as forger:
        forged = await forger.call(query="remember", text="apple", session="s")
        plain = await forger.call(query="check", text="x")
    assert forged.is_error
    assert "Mcp-Session-Id 'made-up' is not a session of this connection" in _text(forged)
    assert _text(plain) == "False"  # the header changes nothing else


@needs_proc
@pytest.mark.slow
async def test_a_closed_session_id_reaches_nothing_and_its_repl_is_gone(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 24, defects 4 and 13: A's id, sent after A's DELETE from another connection, reached A's variables;
    A's sandbox stayed alive."""
    fake_server.root = _root
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--sandbox", "subprocess") as (server, url):
        before = descendants(server.pid)
        async with connect(url, mode="legacy") as owner:
            stored = await owner.call(query="remember", text="apple", session="s")
            taken = owner.session_id
            workers = descendants(server.pid) - before
        assert _text(stored) == "stored" and taken is not None
        assert workers, "the session's sandbox runs below the server"
        # The owner left (its client sent DELETE): its REPL is closed, its processes gone.
        await _until(lambda: not workers & descendants(server.pid), "the ended session's sandbox is still alive")
        async with connect(url, headers={"Mcp-Session-Id": taken}) as thief:
            stolen = await thief.call(query="recall", text="x", session="s")
            again = await thief.call(query="check", text="x")
    assert stolen.is_error and "apple" not in _text(stolen)
    assert f"Mcp-Session-Id {taken!r} is not a session of this connection" in _text(stolen)
    assert _text(again) == "False"


async def test_one_client_cannot_evict_another_clients_running_session(local_url: str, tmp_path: Path) -> None:
    """Issue 24, defect 5: B opening 16 sessions evicted A's session mid-call; A's call never returned."""
    async with connect(local_url, mode="legacy") as a, connect(local_url, mode="legacy") as b:
        held, go = await _hold(a, tmp_path)
        opened = [await b.call(query="check", text="x", session=f"b{i}") for i in range(16)]
        go.touch()
        result = await asyncio.wait_for(held, 60)
        recalled = await a.call(query="recall", text="pear", session="a")
    assert [_text(r) for r in opened] == ["False"] * 16  # B's own oldest made room for B's newer ones
    assert _text(result) == "held"
    assert _text(recalled) == "('apple', 'apple', 'pear', True)"


@pytest.mark.slow
async def test_a_full_client_or_server_is_refused_naming_the_limit(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = _root
    limits = ("--max-sessions", "2", "--max-client-sessions", "1")
    with served(workspace, server_env(fake_server, tmp_path / "logs"), "--sandbox", "local", *limits) as (_, url):
        async with connect(url, mode="legacy") as a, connect(url, mode="legacy") as b, connect(url, mode="legacy") as c:
            held, go = await _hold(a, tmp_path)
            busy = await a.call(query="check", text="x", session="other")
            await b.call(query="check", text="x", session="b")
            full = await c.call(query="check", text="x", session="c")
            go.touch()
            assert _text(await asyncio.wait_for(held, 60)) == "held"
            after = await a.call(query="check", text="x", session="other")  # "a" is idle now: it makes room
    assert busy.is_error and _text(busy).endswith(
        "session 'other' cannot be opened: 1 sessions are open for this caller and each has a call in flight "
        "(--max-client-sessions=1); wait for a call to finish, or reuse an open session"
    )
    assert full.is_error and "2 sessions are open in all and none of this caller's is idle (--max-sessions=2)" in (
        _text(full)
    )
    assert _text(after) == "False"


@needs_proc
@pytest.mark.slow
async def test_an_idle_session_closes_on_a_timer_with_its_processes(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 24, defect 12: the idle limit was only checked on the next call (24 CPU-s burned past 3 s)."""
    spin = "import threading\nthreading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()"
    fake_server.root = [f"```repl\n{spin}\n```", "FINAL(spinning)"]
    env = server_env(fake_server, tmp_path / "logs")
    flags = ["--root", str(workspace), "--sandbox", "subprocess", "--session-idle", "1"]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", *flags],
        env=env,
        cwd=str(workspace),
    )
    async with Client(params) as client:
        before = descendants()  # the server process itself
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x", "session": "s"})
        assert _text(result) == "spinning"
        workers = descendants() - before
        assert workers, "the session's sandbox runs below the server"
        closed_at = time.monotonic()
        # No further call: the timer alone closes it.
        await _until(lambda: not workers & descendants(), "the idle session's sandbox is still alive")
        assert time.monotonic() - closed_at < 10


async def test_sessions_flags_reach_the_pool(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = _root
    config = make_config(sessions=session_limits(max_sessions=1, max_per_owner=1))
    async with Client(build_server(config)) as client:
        first = await client.call_tool("rlm_query", {"query": "remember", "text": "apple", "session": "one"})
        second = await client.call_tool("rlm_query", {"query": "check", "text": "x", "session": "two"})
        gone = await client.call_tool("rlm_query", {"query": "check", "text": "x", "session": "one"})
    assert _text(first) == "stored"
    assert _text(second) == "False" and _text(gone) == "False"  # "one" made room for "two", then came back fresh
