"""A call's max_cost about to stop its run asks the client (MCP elicitation, the SDK's client): accepting
raises it and the run completes; declining returns the partial answer; nobody is asked who cannot answer;
and no answer passes the server's own --max-cost."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.runs.background import RunBook
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig

# Twelve sub-calls of 10,000 prompt tokens each: $0.0025 apiece at gpt-5-mini's price, $0.03 in all.
SCRIPT = [
    '```repl\nparts = llm_query_batched(["x" * 40000 for _ in range(12)])\nprint(len(parts))\n```',
    '```repl\nFINAL(f"done {len(parts)}")\n```',
]
PRICED = {"model": "gpt-5-mini", "sub_model": "gpt-5-mini"}
QUESTION = {"query": "count", "text": "x", "max_cost": 0.01}


class Answering:
    """An elicitation callback answering every question the same way, keeping what it was asked."""

    def __init__(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, _context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        return ElicitResult(action=self.action, content=self.content)  # type: ignore[arg-type]


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result.content
    return result.structured_content


async def test_accepting_raises_max_cost_and_the_run_completes(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = scripted_root(SCRIPT)
    answer = Answering("accept", {"max_cost": 1.0})
    async with Client(build_server(make_config(**PRICED)), mode="legacy", elicitation_callback=answer) as client:
        result = await client.call_tool("rlm_query", QUESTION)
    output = structured(result)
    assert output["finish_reason"] == "final" and output["answer"] == "done 12"
    assert output["cost_usd"] > 0.01
    assert len(answer.asked) == 1
    message = answer.asked[0].message
    assert message.startswith("the run reached max_cost $0.01 after ") and message.endswith("; allow $0.02?")
    schema = answer.asked[0].requested_schema  # type: ignore[union-attr]
    assert schema["properties"]["max_cost"]["default"] == 0.02
    assert fake_server.counters.leaf_requests == 12  # no sub-call was lost or sent twice


async def test_declining_returns_the_partial_answer(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(SCRIPT)
    answer = Answering("decline")
    async with Client(build_server(make_config(**PRICED)), mode="legacy", elicitation_callback=answer) as client:
        result = await client.call_tool("rlm_query", QUESTION)
    output = structured(result)
    assert len(answer.asked) == 1
    assert output["finish_reason"] == "budget"
    assert result.content[0].text.startswith("[the run stopped before a final answer (budget")  # type: ignore[union-attr]
    assert output["cost_usd"] <= 0.01 + 0.0025 * 2  # stopped near the limit, not after all twelve


@pytest.mark.parametrize("answer_with", [{"max_cost": 1000.0}, {"max_cost": 0.005}, {"max_cost": "lots"}])
async def test_no_answer_passes_the_servers_ceiling_or_lowers_the_limit(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, answer_with: dict[str, Any]
) -> None:
    fake_server.root = scripted_root(SCRIPT)
    answer = Answering("accept", answer_with)
    server = build_server(make_config(**PRICED, max_cost=0.015))
    async with Client(server, mode="legacy", elicitation_callback=answer) as client:
        result = await client.call_tool("rlm_query", QUESTION)
    output = structured(result)
    assert output["finish_reason"] == "budget"
    assert len(answer.asked) == 1  # at the ceiling there is nothing more to offer: asked once
    assert answer.asked[0].message.endswith("; allow $0.01?") or answer.asked[0].message.endswith("; allow $0.02?")
    assert output["cost_usd"] <= 0.015 + 0.0025 * 2


async def test_nobody_is_asked_without_elicitation_or_in_the_background(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rlm_adapters.budget")
    fake_server.root = scripted_root(SCRIPT)
    runs = RunBook()
    server = build_server(make_config(**PRICED), runs)
    async with Client(server, mode="legacy") as client:  # no elicitation capability
        plain = await client.call_tool("rlm_query", QUESTION)
    answer = Answering("accept", {"max_cost": 1.0})
    async with Client(server, mode="auto", elicitation_callback=answer) as client:  # 2026-07-28: no mid-call channel
        modern = await client.call_tool("rlm_query", QUESTION)
    async with Client(server, mode="legacy", elicitation_callback=answer) as client:
        started = structured(await client.call_tool("rlm_query", {**QUESTION, "background": True}))
        background = await client.call_tool("rlm_query", {"run_id": started["run_id"], "wait": 60})
    assert [structured(r)["finish_reason"] for r in (plain, modern, background)] == ["budget"] * 3
    assert answer.asked == []
    assert not [r for r in caplog.records if "on_budget" in r.getMessage()], "no hook was called and failed"
    await runs.aclose()
