"""`rlm_query` through the SDK's in-memory client: schema, results, errors, limits, text input."""

from __future__ import annotations

from mcp import Client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.server import INSTRUCTIONS
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig

BATCH_OVER_FILES = '```repl\nanswers = llm_query_batched([d["text"] for d in context])\nprint(answers)\n```'
FINAL_FROM_ANSWERS = '```repl\nFINAL_VAR("best")\n```'


def _batch_then_final(fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(
        [
            BATCH_OVER_FILES + '\n```repl\nbest = [a for a in answers if a != "NONE"][0]\n```',
            FINAL_FROM_ANSWERS,
        ]
    )


async def test_lists_one_tool_with_its_schema(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config())) as client:
        tools = (await client.list_tools()).tools
        assert client.instructions == INSTRUCTIONS
    assert [t.name for t in tools] == ["rlm_query"]
    tool = tools[0]
    properties = tool.input_schema["properties"]
    assert set(properties) == {
        "query",
        "paths",
        "text",
        "model",
        "sub_model",
        "max_depth",
        "max_cost",
        "run_timeout",
        "timeout",  # the older name of run_timeout
        "session",
        "output_schema",
        "background",
        "run_id",
        "wait",
        "cancel",
        "detail",
    }
    # `query` is required for a new call, not for one that reaches a background run by its run_id.
    assert "required" not in tool.input_schema
    assert tool.input_schema["additionalProperties"] is False
    assert properties["paths"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert tool.output_schema is not None
    assert {"answer", "finish_reason", "cost_usd", "sources", "unsupported", "detail", "trajectory_id"} <= set(
        tool.output_schema["properties"]
    )
    assert properties["detail"]["enum"] == ["lean", "full"]
    assert tool.annotations is not None and tool.annotations.read_only_hint is True


async def test_answers_over_a_folder_with_structured_content(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    _batch_then_final(fake_server)
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool(
            "rlm_query", {"detail": "full", "query": "What is the magic number?", "paths": ["docs"]}
        )
    assert not result.is_error
    assert result.content[0].text == "4242\n\nSources:\n- docs/a.md:1"  # type: ignore[union-attr]
    data = result.structured_content
    assert data is not None
    assert data["answer"] == "4242"
    assert data["finish_reason"] == "final"
    assert data["detail"]["iterations"] == 2
    assert data["detail"]["sub_calls"] == 2
    assert [f["path"] for f in data["detail"]["files_read"]] == ["docs/a.md", "docs/b.md"]
    assert data["detail"]["bytes_read"] == sum(f["size"] for f in data["detail"]["files_read"])
    assert data["detail"]["usage"]["sub"]["calls"] == 2
    assert data["detail"]["usage"]["by_model"]["leaf-model"]["calls"] == 2
    assert data["detail"]["trajectory_uri"] == f"rlm://trajectories/{data['trajectory_id']}"
    # The leaf model saw the file's text: it was read from disk, not from the call.
    assert fake_server.counters.by_model["leaf-model"] == 2


async def test_globs_and_inline_text_together(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(", ".join(d["id"] for d in context))\n```'])
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "ids?", "paths": ["**/*.md"], "text": "extra"})
    assert not result.is_error
    # The files named are cited whole; the inline text is input but not a file, so "text" is not.
    assert result.content[0].text == "docs/a.md, docs/b.md, text\n\nSources:\n- docs/a.md\n- docs/b.md"  # type: ignore[union-attr]


async def test_text_only_context_is_a_string(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(["```repl\nFINAL(llm_query(context))\n```"])
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool(
            "rlm_query", {"detail": "full", "query": "q", "text": "the magic number is 777"}
        )
    assert result.structured_content is not None
    assert result.structured_content["answer"] == "777"
    assert result.structured_content["detail"]["files_read"] == []


async def test_no_model_configured_is_one_clear_error(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    server = build_server(make_config(model=None, sub_model=None, base_url=None, api_key=None, environ={}))
    async with Client(server) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["rlm_query"]
        result = await client.call_tool("rlm_query", {"query": "q", "paths": ["docs"]})
    assert result.is_error
    message = result.content[0].text  # type: ignore[union-attr]
    for variable in ("RLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY"):
        assert variable in message
    assert fake_server.counters.requests == 0


async def test_model_from_the_environment(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    environ = {"RLM_MODEL": "env-root", "OPENAI_BASE_URL": fake_server.base_url, "OPENAI_API_KEY": "k"}
    config = make_config(model=None, sub_model=None, base_url=None, api_key=None, environ=environ)
    async with Client(build_server(config)) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "abc"})
    assert not result.is_error
    assert fake_server.counters.by_model["env-root"] >= 1


async def test_call_names_its_own_models(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(["```repl\nFINAL(llm_query('the magic number is 31337'))\n```"])
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool(
            "rlm_query", {"query": "q", "text": "x", "model": "other-root", "sub_model": "other-leaf"}
        )
    assert not result.is_error
    assert set(fake_server.counters.by_model) == {"other-root", "other-leaf"}


async def test_missing_inputs_and_empty_query_are_refused(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config())) as client:
        no_input = await client.call_tool("rlm_query", {"query": "q"})
        empty = await client.call_tool("rlm_query", {"query": "  ", "text": "x"})
    assert no_input.is_error and "give `paths`" in no_input.content[0].text  # type: ignore[union-attr]
    assert empty.is_error and "`query` is empty" in empty.content[0].text  # type: ignore[union-attr]


async def test_limits_above_the_server_ceiling_are_refused(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config(max_depth=1, max_cost=1.0))) as client:
        depth = await client.call_tool("rlm_query", {"query": "q", "text": "x", "max_depth": 2})
        cost = await client.call_tool("rlm_query", {"query": "q", "text": "x", "max_cost": 5})
        negative = await client.call_tool("rlm_query", {"query": "q", "text": "x", "timeout": -1})
    assert depth.is_error and "max_depth=2 is above" in depth.content[0].text  # type: ignore[union-attr]
    assert cost.is_error and "--max-cost" in cost.content[0].text  # type: ignore[union-attr]
    assert negative.is_error and "timeout=-1" in negative.content[0].text  # type: ignore[union-attr]


async def test_timeout_returns_the_partial_answer(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(["```repl\nprint(1)\n```"])
    fake_server.root_latency = 0.3
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x", "timeout": 0.5})
    assert result.structured_content is not None
    assert result.structured_content["finish_reason"] == "timeout"
    assert not result.is_error
    assert result.content[0].text.startswith("[the run stopped before a final answer (timeout")  # type: ignore[union-attr]


async def test_model_failure_is_an_error_result(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.fail_next(status=400, count=5, message="bad request from the fake")
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["finish_reason"] == "error"
    assert "bad request from the fake" in (result.structured_content["error"] or "")


async def test_a_missing_key_names_the_variables_not_backend_kwargs(make_config: MakeConfig) -> None:
    config = make_config(base_url=None, api_key=None, environ={})
    async with Client(build_server(config)) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "abc"})
    assert result.is_error
    message = result.content[0].text  # type: ignore[union-attr]
    assert "set OPENAI_API_KEY" in message and "--base-url" in message and "backend_kwargs" not in message
