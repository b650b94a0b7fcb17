"""Trajectories as resources: the recent list and one run by id, each client seeing only its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig, server_env
from tests.mcp_server.test_http import connect, served


async def test_a_run_is_readable_by_its_trajectory_id(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(["```repl\nprint(len(context))\n```", "FINAL(three)"])
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "how long?", "text": "abc"})
        assert result.structured_content is not None
        run_id = result.structured_content["trajectory_id"]
        one = await client.read_resource(f"rlm://trajectories/{run_id}")
        recent = await client.read_resource("rlm://trajectories")
        templates = (await client.list_resource_templates()).resource_templates
    trajectory = json.loads(one.contents[0].text)  # type: ignore[union-attr]
    assert trajectory["header"]["run_id"] == run_id
    assert trajectory["header"]["query"] == "how long?"
    kinds = [e["kind"] for e in trajectory["events"]]
    # The run's events, then the record of its sources and claims, added once they were computed.
    assert kinds[0] == "run_start" and kinds[-2:] == ["final", "sources"]
    assert any(e["kind"] == "cell" and e["output"].strip() == "3" for e in trajectory["events"])
    assert json.loads(recent.contents[0].text) == [  # type: ignore[union-attr]
        {
            "id": run_id,
            "uri": f"rlm://trajectories/{run_id}",
            "time": trajectory["header"]["time"],
            "query": "how long?",
            "finish_reason": "final",
        }
    ]
    assert [t.uri_template for t in templates] == ["rlm://trajectories/{trajectory_id}"]


async def test_a_unique_prefix_finds_the_run(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(["FINAL(x)"])
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "abc"})
        assert result.structured_content is not None
        run_id = result.structured_content["trajectory_id"]
        one = await client.read_resource(f"rlm://trajectories/{run_id[:12]}")
    assert json.loads(one.contents[0].text)["header"]["run_id"] == run_id  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("bad", "refusal"),
    [
        ("..%2F..%2Fetc%2Fpasswd", "Unknown resource"),  # the SDK's own template security check
        ("*", "is not a trajectory id"),
        ("0123456789abcdef0123456789abcdef00", "is not a trajectory id"),
        ("NOTHEX12", "is not a trajectory id"),
    ],
)
async def test_ids_that_are_not_hex_run_ids_are_refused(make_config: MakeConfig, bad: str, refusal: str) -> None:
    async with Client(build_server(make_config())) as client:
        with pytest.raises(MCPError, match=refusal):
            await client.read_resource(f"rlm://trajectories/{bad}")


async def test_unknown_id_and_empty_log_folder(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config())) as client:
        with pytest.raises(MCPError, match="no trajectory 'deadbeef'"):
            await client.read_resource("rlm://trajectories/deadbeef")
        recent = await client.read_resource("rlm://trajectories")
    assert json.loads(recent.contents[0].text) == []  # type: ignore[union-attr]


async def _recent(client: Client) -> list[dict[str, object]]:
    listed = json.loads((await client.read_resource("rlm://trajectories")).contents[0].text)  # type: ignore[union-attr]
    assert isinstance(listed, list)
    return listed


@pytest.mark.slow
async def test_over_http_each_client_reads_only_its_own_trajectories(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 24, defect 13: every client read every other client's trajectories (queries, printed files)."""
    fake_server.root = scripted_root(["```repl\nprint(context)\n```", "FINAL(done)"])
    with served(workspace, server_env(fake_server, tmp_path / "logs"), "--sandbox", "local") as (_, url):
        async with connect(url, mode="legacy") as alice, connect(url, mode="legacy") as bob:
            ran = await alice.call(query="alice's private question", text="alice's pasted secret")
            run_id = ran.structured_content["trajectory_id"]
            mine = await alice.client.read_resource(f"rlm://trajectories/{run_id}")
            alice_sees, bob_sees = await _recent(alice.client), await _recent(bob.client)
            for spelled in (run_id, run_id[:8]):
                with pytest.raises(MCPError, match=rf"^no trajectory '{spelled}'$"):
                    await bob.client.read_resource(f"rlm://trajectories/{spelled}")
        async with connect(url) as modern:  # 2026-07-28: session-less
            with pytest.raises(MCPError, match=rf"^no trajectory '{run_id}'$"):
                await modern.client.read_resource(f"rlm://trajectories/{run_id}")
            own = await modern.call(query="a session-less question", text="x")
            own_id = own.structured_content["trajectory_id"]
            by_full_id = await modern.client.read_resource(f"rlm://trajectories/{own_id}")
            with pytest.raises(MCPError, match=rf"^no trajectory '{own_id[:12]}'$"):
                await modern.client.read_resource(f"rlm://trajectories/{own_id[:12]}")
            modern_sees = await _recent(modern.client)
        async with connect(url, mode="legacy") as later:  # a new MCP session, after Alice's ended
            with pytest.raises(MCPError, match="no trajectory"):
                await later.client.read_resource(f"rlm://trajectories/{run_id}")
    assert "alice's pasted secret" in mine.contents[0].text  # type: ignore[union-attr]
    assert [run["id"] for run in alice_sees] == [run_id]
    assert bob_sees == [] and modern_sees == []
    assert json.loads(by_full_id.contents[0].text)["header"]["query"] == "a session-less question"  # type: ignore[union-attr]
