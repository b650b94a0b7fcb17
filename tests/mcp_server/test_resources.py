"""Trajectories as resources: the recent list and one run by id."""

from __future__ import annotations

import json

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig


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
    assert kinds[0] == "run_start" and kinds[-1] == "final"
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
