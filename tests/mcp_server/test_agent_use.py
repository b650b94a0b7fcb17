"""What an agent sees (issue 18): cited sources, a description that says when, prompts, readable progress.

Each through a real client: the SDK client in memory and over stdio, and the MCP Inspector's CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.server import TOOL_DESCRIPTION
from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.mcp_server.conftest import MakeConfig, server_env
from tests.mcp_server.inspector import INSPECTOR, needs_inspector

QUESTION = "What are the rollout passwords?"
PROMPTS = ["summarize-logs", "find-in-repo", "compare-documents"]


def _block() -> str:
    """The Sources: block the text content must end with, best (highest scoring) first: all score 2 here."""
    ordered = sorted(planted.expected())
    return "Sources:\n" + "\n".join(f"- {path}:{line}" for path, line, _ in ordered)


@pytest.fixture
def tree(workspace: Path) -> Path:
    return planted.make_tree(workspace / "repo")


@pytest.mark.parametrize("sandbox", ["local", "subprocess"])
async def test_planted_facts_come_back_as_sources_in_structure_and_text(
    sandbox: str, make_config: MakeConfig, fake_server: FakeOpenAIServer, tree: Path
) -> None:
    fake_server.root = planted.root()
    async with Client(build_server(make_config(roots=[tree], sandbox=sandbox))) as client:
        result = await client.call_tool("rlm_query", {"query": QUESTION, "paths": ["src"], "detail": "full"})
    assert not result.is_error and result.structured_content is not None
    sources = result.structured_content["detail"]["sources"]
    lines = [(s["line_start"], s["line_end"]) for s in sources]
    shown = [f"{s['path']}:{a}" if a == b else f"{s['path']}:{a}-{b}" for s, (a, b) in zip(sources, lines, strict=True)]
    assert result.structured_content["sources"] == shown
    assert {(s["path"], s["line_start"], s["line_end"]) for s in sources} == planted.expected()
    assert all("rollout password" in s["excerpt"] and s["chars"] == len(s["excerpt"]) for s in sources)
    assert result.content[0].text == f"{planted.ANSWER_TEXT}\n\n{_block()}"  # type: ignore[union-attr]


def test_the_description_says_when_and_stays_short() -> None:
    for point in ("far larger than you should read yourself", "not pasted", "one precise question", "minutes"):
        assert point in TOOL_DESCRIPTION
    assert "rlm://trajectories/{id}" in TOOL_DESCRIPTION and "sources" in TOOL_DESCRIPTION
    assert "outlast your tool timeout" in TOOL_DESCRIPTION and "background: true" in TOOL_DESCRIPTION
    assert len(TOOL_DESCRIPTION) < 700


async def test_stdio_client_sees_sources_prompts_and_readable_progress(
    fake_server: FakeOpenAIServer, tree: Path, tmp_path: Path
) -> None:
    fake_server.root = planted.root()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(tree), "--sandbox", "local"],
        env=server_env(fake_server, tmp_path / "logs"),
        cwd=str(tree),
    )
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(params) as client:
        tool = (await client.list_tools()).tools[0]
        prompts = (await client.list_prompts()).prompts
        prompt = await client.get_prompt("find-in-repo", {"what": "the retry settings", "paths": "src, docs"})
        result = await client.call_tool(
            "rlm_query", {"query": QUESTION, "paths": ["src"]}, progress_callback=on_progress
        )
    assert tool.description == TOOL_DESCRIPTION
    assert tool.output_schema is not None and "sources" in tool.output_schema["properties"]
    assert "not pasted" not in str(tool.input_schema) and "Prefer this over `text`" in str(tool.input_schema)
    assert [p.name for p in prompts] == PROMPTS
    assert {a.name: a.required for a in prompts[1].arguments or []} == {"what": True, "paths": False}
    call = _ready_call(prompt.messages[0].content.text)  # type: ignore[union-attr]
    assert call == {
        "query": "Find the retry settings. Name every place that matters with its file and line, and explain "
        "in one sentence each how it relates.",
        "paths": ["src", "docs"],
    }
    assert result.content[0].text.endswith(_block())  # type: ignore[union-attr]
    assert messages[0] == "starting · iteration 0/30 · $0.00"
    assert "starting · iteration 0/30 · $0.00 · reading 300 files" in messages
    assert "iteration 2/30 · 0/5 sub-calls · $0.00 · reading 300 files" in messages
    assert messages[-1] == "done · iteration 2/30 · 5 sub-calls · $0.00 · reading 300 files"


def _ready_call(text: str) -> dict[str, Any]:
    """The JSON arguments a prompt asks the agent to call rlm_query with."""
    assert "Call the `rlm_query` tool once with exactly these arguments" in text
    parsed: dict[str, Any] = json.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])
    return parsed


def _inspect(tree: Path, env: dict[str, str], *args: str) -> Any:
    command = [*INSPECTOR, sys.executable, "-m", "rlm_adapters.mcp_server", "--root", str(tree)]
    command += ["--sandbox", "local", *args]
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"{args} failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout)


@pytest.mark.npx
@needs_inspector
@pytest.mark.slow
def test_inspector_cli_sees_the_description_schema_prompts_and_sources(
    fake_server: FakeOpenAIServer, tree: Path, tmp_path: Path
) -> None:
    fake_server.root = planted.root()
    env = server_env(fake_server, tmp_path / "logs")
    tools = _inspect(tree, env, "--method", "tools/list")["tools"]
    assert tools[0]["description"] == TOOL_DESCRIPTION
    assert tools[0]["outputSchema"]["properties"]["sources"]["items"]["type"] == "string"  # lean: path:line
    prompts = _inspect(tree, env, "--method", "prompts/list")["prompts"]
    assert [p["name"] for p in prompts] == PROMPTS
    got = _inspect(
        tree, env, "--method", "prompts/get", "--prompt-name", "summarize-logs", "--prompt-args", "paths=logs/*.log"
    )
    assert _ready_call(got["messages"][0]["content"]["text"])["paths"] == ["logs/*.log"]
    called = _inspect(
        tree,
        env,
        "--method",
        "tools/call",
        "--tool-name",
        "rlm_query",
        "--tool-arg",
        f"query={QUESTION}",
        "--tool-arg",
        'paths=["src"]',
    )
    assert called["content"] == [{"type": "text", "text": f"{planted.ANSWER_TEXT}\n\n{_block()}"}]
    assert len(called["structuredContent"]["sources"]) == len(planted.expected())  # lean: "path:start-end"
    for path, start, end in planted.expected():
        assert f"{path}:{start}" + (f"-{end}" if end != start else "") in called["structuredContent"]["sources"]
