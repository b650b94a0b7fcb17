"""Issue 40 end to end: the plugin turns `rlm_recall` on in Claude Code, and after a real ``/compact`` the
agent gets back, through it, a fact the compaction dropped, citing the early turn (``session:line``, time).

Everything the model side does is the scripted `fake_messages_api`; everything else is real: the pinned
Claude Code installs the plugin, writes the transcript, runs the plugin's hooks and ``/compact`` (in ``-p``
mode, resuming the session), starts the plugin's server and calls its tool. The RLM inside the server runs
against the fake OpenAI-compatible server.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from rlm_adapters.mcp_server.recall.tool import INSTRUCTIONS as RECALL_INSTRUCTIONS
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.claude import claude, needs_claude
from tests.plugin.fake_messages_api import messages_api
from tests.plugin.test_claude_plugin import install, plain_env, received_text

LAUNCHER = Path(__file__).resolve().parents[2] / "plugins" / "rlm" / "scripts" / "start-rlm-mcp.sh"
RECALL = "mcp__plugin_rlm_rlm__rlm_recall"
FACT = "ZIRCON-7731"  # in no file, no prompt and no summary but the first user turn
FIRST = f"Remember this for later: the release codename is {FACT}. Now read notes.md."
QUESTION = "Which release codename did I give you at the very start?"
SUMMARY = "<summary>The user asked to read notes.md; it lists chores. Nothing is pending.</summary>"
# The RLM's root model: the user turns that name a codename, the earliest one to a sub-model, its answer.
ROOT_CODE = (
    "```repl\n"
    'lines = context[0]["text"].split("\\n")\n'
    'said = [l for l in lines if " user] " in l and "codename is" in l]\n'
    'FINAL(llm_query("Which codename does this turn give? " + said[0]))\n'
    "```"
)


def leaf(prompt: str) -> str:
    """The sub-model: reads the codename off the turn it is shown."""
    found = re.search(r"codename is ([A-Z]+-\d+)", prompt)
    return found.group(1) if found else "NONE"


def _tool_results(messages: list[Any], tool_use_id: str) -> list[dict[str, Any]]:
    return [
        block
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id
    ]


def first_session(body: dict[str, Any]) -> dict[str, Any]:
    """The model of the first turn: reads notes.md (a second API round, which /compact needs), then ``Noted.``"""
    if not body.get("tools"):  # the session's title
        return {"type": "text", "text": '{"title": "Read the notes"}'}
    if not _tool_results(body.get("messages", []), "toolu_notes"):
        return {"type": "tool_use", "id": "toolu_notes", "name": "Read", "input": {"file_path": "notes.md"}}
    return {"type": "text", "text": "Noted."}


def summarizing(_body: dict[str, Any]) -> dict[str, Any]:
    """The model asked for the compaction's summary: one without the fact."""
    return {"type": "text", "text": SUMMARY}


def recalling_session(body: dict[str, Any]) -> dict[str, Any]:
    """The model after the compaction: asks rlm_recall, then answers with what it returned."""
    if not body.get("tools"):
        return {"type": "text", "text": '{"title": "Recall the codename"}'}
    results = _tool_results(body.get("messages", []), "toolu_recall")
    if not results:
        return {"type": "tool_use", "id": "toolu_recall", "name": RECALL, "input": {"query": QUESTION}}
    return {"type": "text", "text": "From this session's transcript: " + received_text(results[-1])}


def _run(home: Path, project: Path, args: list[str], script: Any, env: dict[str, str], **call: Any) -> Any:
    with messages_api(script=script, **call) as (url, requests):
        session = plain_env(home, with_this_python=False)
        session.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-not-used", **env)
        done = claude(["-p", *args, "--output-format", "json"], session, project, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout), requests


@pytest.mark.slow
@needs_claude
def test_after_a_compaction_rlm_recall_brings_back_the_early_turn(tmp_path: Path) -> None:
    server = Path(sys.executable).parent / "rlm-mcp"
    if not server.is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    home, project = install(tmp_path, f"server_command={server}")
    (project / "notes.md").write_text("# Chores\n- water the plants\n")
    with FakeOpenAIServer(root=[ROOT_CODE], leaf=leaf) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "x", "RLM_MODEL": "root-model"}
        env |= {"RLM_SUB_MODEL": "leaf-model", "RLM_SANDBOX": "local", "RLM_MCP_LOG_DIR": str(tmp_path / "logs")}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        # 1. The fact, stated in the first user turn.
        started, _ = _run(home, project, [FIRST], first_session, env)
        session = started["session_id"]
        # 2. A real compaction of that session.
        compacted, _ = _run(home, project, ["/compact", "--resume", session], summarizing, env)
        assert compacted["session_id"] == session and "Not enough messages" not in compacted["result"], compacted
        # 3. The question, in the compacted session: the model recalls.
        answered, requests = _run(
            home, project, [QUESTION, "--resume", session, "--allowedTools", RECALL], recalling_session, env,
            call=(RECALL, {}),
        )  # fmt: skip
    assert answered["session_id"] == session
    asked = [r for r in requests if r.get("tools")]
    # The plugin's server is served with rlm_recall, and its instructions say when to use it.
    assert RECALL in [t.get("name") for t in asked[-1]["tools"]]
    sent = json.dumps(asked[-1])
    where = [sent[max(0, m.start() - 300) : m.start() + 100] for m in re.finditer("rlm_query answers", sent)]
    assert RECALL_INSTRUCTIONS in sent, where
    # The compaction dropped the fact from what the agent's model sees ...
    before = [r for r in asked if not _tool_results(r["messages"], "toolu_recall")]
    assert before and all(FACT not in json.dumps(r["messages"]) for r in before)
    # ... and the transcript Claude Code wrote still has it, on the line the answer must cite.
    [transcript] = (home / ".claude" / "projects").rglob(f"{session}.jsonl")
    records = [json.loads(line) for line in transcript.read_text().splitlines()]
    boundary = next((n for n, r in enumerate(records, 1) if r.get("subtype") == "compact_boundary"), None)
    assert boundary is not None, "Claude Code did not compact"
    [(line, turn)] = [
        (n, r)
        for n, r in enumerate(records[:boundary], 1)
        if r.get("type") == "user" and FACT in json.dumps(r.get("message"))
    ]
    [block] = _tool_results(requests[-1]["messages"], "toolu_recall")
    received = received_text(block)
    cited = f"{session}:{line} ({turn['timestamp']})"
    assert block.get("is_error") is not True and FACT in received and cited in received, received
    assert FACT in answered["result"] and cited in answered["result"], answered["result"]
    # Lean, as rlm_query's: the answer and its one source, not the transcript or the run's record.
    size = len(json.dumps(block).encode())
    print(f"\nrlm_recall: the model received {size} bytes ({len(received)} characters of text) for a "
          f"{transcript.stat().st_size}-byte transcript")  # fmt: skip
    assert '"claims"' not in received and '"files_read"' not in received and "notes.md" not in received
    assert size * 20 < transcript.stat().st_size and size < 1500, received


async def test_the_launcher_serves_rlm_recall_before_claude_code_made_its_projects_folder(tmp_path: Path) -> None:
    # A first session: Claude Code's folder is there (the plugin is installed in it), its projects not yet.
    server = Path(sys.executable).parent / "rlm-mcp"
    if not server.is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".claude").mkdir(parents=True)
    project.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "RLM_PLUGIN_SERVER_COMMAND": str(server)}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    params = StdioServerParameters(command="/bin/sh", args=[str(LAUNCHER), "--root", str(project)], env=env)
    async with Client(params) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        instructions = client.instructions
        called = await client.call_tool("rlm_recall", {"query": "what did I say?", "session": "all"})
    assert tools == ["rlm_query", "rlm_recall"] and instructions is not None and RECALL_INSTRUCTIONS in instructions
    assert called.is_error
    assert "no Claude Code transcripts yet: " in called.content[0].text  # type: ignore[union-attr]
    assert f"{home / '.claude' / 'projects'} does not exist" in called.content[0].text  # type: ignore[union-attr]
