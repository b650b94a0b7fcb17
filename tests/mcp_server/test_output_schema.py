"""`rlm_query(output_schema=...)`: the answer validated by the engine, the value in the structured result."""

from __future__ import annotations

import json

from mcp import Client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import MakeConfig

SCHEMA = {
    "type": "object",
    "properties": {"number": {"type": "integer"}, "file": {"type": "string"}},
    "required": ["number", "file"],
    "additionalProperties": False,
}


async def test_the_value_comes_back_validated(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = [
        '```repl\nFINAL_VAR({"number": "many", "file": "docs/a.md"})\n```',
        '```repl\nFINAL_VAR({"number": 4242, "file": "docs/a.md"})\n```',
    ]
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool(
            "rlm_query", {"query": "Which number, in which file?", "paths": ["docs"], "output_schema": SCHEMA}
        )
    assert not result.is_error
    data = result.structured_content
    assert data is not None and data["finish_reason"] == "final"
    assert data["value"] == {"number": 4242, "file": "docs/a.md"}
    assert json.loads(data["answer"]) == data["value"]
    # The first, invalid value went back to the root model with what was wrong with it.
    feedback = fake_server.requests_log[1]["messages"][-1]["content"]
    assert "value['number'] should be integer" in feedback


async def test_no_valid_value_is_an_error_result_with_no_value(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = ['```repl\nFINAL_VAR({"number": 1})\n```']
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "t", "output_schema": SCHEMA})
    data = result.structured_content
    assert result.is_error and data is not None and data["finish_reason"] == "error"
    assert data["value"] is None and "missing the required key 'file'" in data["error"]


async def test_a_schema_the_engine_cannot_enforce_is_refused_before_any_model_call(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool(
            "rlm_query", {"query": "q", "text": "t", "output_schema": {"type": "object", "dependentSchemas": {}}}
        )
    assert result.is_error
    assert "output_schema at '#': the keyword 'dependentSchemas' is not supported" in result.content[0].text  # type: ignore[union-attr]
    assert fake_server.counters.requests == 0


async def test_a_background_run_keeps_the_schema_and_its_fetch_has_the_value(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = ['```repl\nFINAL_VAR({"number": 4242, "file": "docs/a.md"})\n```']
    arguments = {"query": "Which number, in which file?", "paths": ["docs"], "output_schema": SCHEMA}
    async with Client(build_server(make_config())) as client:
        started = await client.call_tool("rlm_query", {**arguments, "background": True})
        assert started.structured_content is not None
        fetched = await client.call_tool("rlm_query", {"run_id": started.structured_content["run_id"], "wait": 60})
    assert fetched.structured_content is not None
    assert fetched.structured_content["value"] == {"number": 4242, "file": "docs/a.md"}
