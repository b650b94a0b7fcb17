"""The MCP client's own model as the backend (``sampling/createMessage``), through the SDK client's sampling
callback: over stdio against the real console entry point, and in memory for the protocol-version rule."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.runs.sampling import ESTIMATED_NOTE, reported_usage
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import ROOT_MARKER, default_leaf, turn_of
from tests.mcp_server.conftest import MakeConfig
from tests.mcp_server.test_http import start_http_server

ROOT_TURNS = ["```repl\nanswer = llm_query(context)\nprint(answer)\n```", "FINAL_VAR(answer)"]


def _env(log_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
    env["RLM_MCP_LOG_DIR"] = str(log_dir)
    return env


def _params(workspace: Path, log_dir: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(workspace), "--sandbox", "local"],
        env=_env(log_dir),
        cwd=str(workspace),
    )


class ClientModel:
    """The client's model: plays the root by turn and answers sub-calls from their prompt."""

    def __init__(self, *, usage: bool = True) -> None:
        self.usage = usage
        self.requests: list[types.CreateMessageRequestParams] = []

    def reply(self, params: types.CreateMessageRequestParams) -> str:
        messages = [{"role": m.role, "content": getattr(m.content, "text", "")} for m in params.messages]
        if ROOT_MARKER in (params.system_prompt or ""):
            return ROOT_TURNS[min(turn_of(messages), len(ROOT_TURNS) - 1)]
        return default_leaf(str(messages[-1]["content"]))

    async def __call__(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.requests.append(params)
        text = self.reply(params)
        meta = {"usage": {"inputTokens": 100 + len(self.requests), "outputTokens": 7}} if self.usage else None
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=text),
            model="client-model",
            stop_reason="endTurn",
            _meta=meta,
        )


@pytest.mark.slow
async def test_root_and_sub_calls_go_to_the_clients_model(workspace: Path, tmp_path: Path) -> None:
    model = ClientModel()
    async with Client(_params(workspace, tmp_path / "logs"), sampling_callback=model, mode="legacy") as client:
        result = await client.call_tool(
            "rlm_query", {"detail": "full", "query": "What is the magic number?", "paths": ["docs/a.md"]}
        )

    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "4242"
    roots = [p for p in model.requests if ROOT_MARKER in (p.system_prompt or "")]
    subs = [p for p in model.requests if p not in roots]
    assert (len(roots), len(subs)) == (2, 1)
    assert all(
        p.model_preferences == types.ModelPreferences(intelligence_priority=0.9, speed_priority=0.3, cost_priority=0.3)
        for p in roots
    )
    sub_preferences = subs[0].model_preferences
    assert sub_preferences is not None and sub_preferences.speed_priority == sub_preferences.cost_priority == 0.8
    assert sub_preferences.intelligence_priority == 0.3
    usage = result.structured_content["detail"]["usage"]  # type: ignore[index]
    # The tokens are the ones the client reported: 100 + n input and 7 output per request.
    assert usage["total"] == {"calls": 3, "input_tokens": 101 + 102 + 103, "output_tokens": 21, "cost": 0.0}
    assert set(usage["by_model"]) == {"client-model"}
    assert "estimated" not in usage


async def test_a_client_that_reports_no_usage_gets_estimates_and_is_told(workspace: Path, tmp_path: Path) -> None:
    model = ClientModel(usage=False)
    async with Client(_params(workspace, tmp_path / "logs"), sampling_callback=model, mode="legacy") as client:
        result = await client.call_tool(
            "rlm_query", {"detail": "full", "query": "What is the magic number?", "text": "magic number 555"}
        )

    assert result.structured_content is not None
    assert result.structured_content["answer"] == "555"
    usage = result.structured_content["detail"]["usage"]  # type: ignore[index]
    assert usage["estimated"] == ESTIMATED_NOTE
    assert usage["total"]["calls"] == 3 and usage["total"]["input_tokens"] > 0


async def test_a_client_that_refuses_sampling_ends_the_call_with_its_reason(workspace: Path, tmp_path: Path) -> None:
    async def refuse(context: Any, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=types.INVALID_REQUEST, message="the user declined the request")

    async with Client(_params(workspace, tmp_path / "logs"), sampling_callback=refuse, mode="legacy") as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"})

    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["finish_reason"] == "error"
    error = result.structured_content["error"]
    assert "refused the sampling request" in error and "the user declined the request" in error
    assert "RLM_MODEL" in error


@pytest.mark.slow
async def test_progress_keeps_flowing_while_a_slow_client_samples(workspace: Path, tmp_path: Path) -> None:
    model = ClientModel()
    sampling = asyncio.Event()
    heartbeat_during_sampling = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if sampling.is_set():
            heartbeat_during_sampling.set()

    async def slow(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        if not model.requests:  # the first (root) request answers only once progress arrived meanwhile
            sampling.set()
            await asyncio.wait_for(heartbeat_during_sampling.wait(), 30)
        return await model(context, params)

    async with Client(_params(workspace, tmp_path / "logs"), sampling_callback=slow, mode="legacy") as client:
        result = await client.call_tool(
            "rlm_query",
            {"query": "What is the magic number?", "text": "magic number 8080"},
            progress_callback=on_progress,
        )

    assert heartbeat_during_sampling.is_set()
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "8080"


async def test_a_configured_model_wins_over_sampling(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    model = ClientModel()
    async with Client(build_server(make_config()), sampling_callback=model, mode="legacy") as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "the magic number is 777"})
    assert not result.is_error
    assert model.requests == []
    assert fake_server.counters.requests > 0


async def test_on_protocol_2026_sampling_cannot_run_mid_call_and_the_tool_says_what_to_set(
    make_config: MakeConfig,
) -> None:
    config = make_config(model=None, sub_model=None, base_url=None, api_key=None, environ={})
    model = ClientModel()
    async with Client(build_server(config), sampling_callback=model) as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text and "RLM_MODEL" in text and "2026-07-28" in text
    assert model.requests == []


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ({"usage": {"inputTokens": 3, "outputTokens": 4}}, (3, 4)),
        ({"usage": {"input_tokens": 5, "output_tokens": 6}}, (5, 6)),
        ({"usage": {"prompt_tokens": 7, "completion_tokens": 8}}, (7, 8)),
        ({"usage": {"inputTokens": "3", "outputTokens": 4}}, None),
        ({"usage": {"inputTokens": -1, "outputTokens": 4}}, None),
        ({}, None),
        (None, None),
    ],
)
def test_reported_usage_spellings(meta: dict[str, Any] | None, expected: tuple[int, int] | None) -> None:
    assert reported_usage(meta) == expected


@pytest.mark.slow
async def test_sampling_over_streamable_http(workspace: Path, tmp_path: Path) -> None:
    process, url = start_http_server(workspace, _env(tmp_path / "logs"), "--sandbox", "local")
    try:
        model = ClientModel()
        http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=300))
        transport = streamable_http_client(url, http_client=http)
        async with http, Client(transport, sampling_callback=model, mode="legacy") as client:
            result = await client.call_tool("rlm_query", {"query": "q", "text": "magic number 1212"})
    finally:
        process.terminate()
        process.wait(10)
        assert process.stderr is not None
        process.stderr.close()
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "1212"
    assert len(model.requests) == 3


async def test_a_persistent_session_needs_a_configured_model(make_config: MakeConfig) -> None:
    config = make_config(model=None, sub_model=None, base_url=None, api_key=None, environ={})
    model = ClientModel()
    async with Client(build_server(config), sampling_callback=model, mode="legacy") as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x", "session": "notes"})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "session='notes' needs a model configured" in text and "RLM_MODEL" in text
    assert model.requests == []
