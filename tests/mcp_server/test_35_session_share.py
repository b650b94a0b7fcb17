"""Issue 35, item 5 of the helpers' list: ``--max-sessions`` shared per principal.

Over HTTP without a token every MCP session is a principal of its own, made for nothing, so one client could
hold every ``session=`` REPL of the server (``--max-client-sessions`` as high as ``--max-sessions``). Such a
principal now holds at most half of ``--max-sessions`` (rounded up), as ``--max-runs`` already does: its third
session of four closes its own least recently used idle one. With ``--token`` the holders are trusted and keep
their whole quota.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from rlm_adapters.hosting.pool import PoolLimits
from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.sessions import store as session_store
from rlm_adapters.mcp_server.sessions.live import share_of
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import MakeConfig, server_env
from tests.mcp_server.test_http import connect, served
from tests.mcp_server.test_sessions import _root, _text

LIMITS = ("--max-sessions", "4", "--max-client-sessions", "4")


@pytest.mark.parametrize(("token", "kept"), [(None, "False"), ("s3cret-token-for-the-test", "True")])
@pytest.mark.slow
async def test_a_tokenless_client_holds_at_most_half_of_the_servers_sessions(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, token: str | None, kept: str
) -> None:
    fake_server.root = _root
    flags = [*LIMITS, *(["--token", token] if token else [])]
    with served(workspace, server_env(fake_server, tmp_path / "logs"), "--sandbox", "local", *flags) as (_, url):
        async with connect(url, mode="legacy", token=token) as a:
            assert _text(await a.call(query="remember", text="apple", session="s0")) == "stored"
            for name in ("s1", "s2"):  # a third session: over half of 4 without a token
                assert _text(await a.call(query="check", text="x", session=name)) == "False"
            first = await a.call(query="check", text="x", session="s0")
    assert _text(first) == kept  # without a token, s0 made room for s2 and came back fresh


def test_the_share_is_named_in_refusals_and_never_raises_a_quota() -> None:
    names = {"max_sessions": "--max-sessions", "max_per_owner": "--max-client-sessions"}
    shared = share_of(PoolLimits(max_sessions=5, max_per_owner=4, names=names))
    assert shared.max_per_owner == 3 and shared.name("max_per_owner") == "--max-sessions/2"
    small = PoolLimits(max_sessions=16, max_per_owner=4, names=names)
    assert share_of(small) is small  # the defaults: a quota of 4 is already under half of 16
    assert share_of(PoolLimits(max_sessions=1, max_per_owner=1)).max_per_owner == 1


async def test_the_sessions_file_is_written_off_the_event_loop(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It is rewritten whole under a lock across processes: on the loop, every other client waited for it."""
    fake_server.root = _root
    loop_thread = threading.get_ident()
    writers: list[int] = []
    original = session_store.update_private_json

    def watched(*args: Any, **kwargs: Any) -> Any:
        writers.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(session_store, "update_private_json", watched)
    cache = tmp_path / "calls.sqlite"
    async with Client(build_server(make_config(cache=cache))) as client:
        assert _text(await client.call_tool("rlm_query", {"query": "remember", "text": "a", "session": "s"})) == (
            "stored"
        )
        second = await client.call_tool("rlm_query", {"query": "recall", "text": "b", "session": "s"})
    assert _text(second) == "('a', 'a', 'b', True)"
    assert writers and loop_thread not in writers  # written (more than once), never on the loop's thread
    records = json.loads(session_store.store_path(cache).read_text())["sessions"]
    assert [r["name"] for r in records] == ["s"] and len(records[0]["turns"]) == 2
