"""`rlm_recall` end to end: `rlm-mcp --transcripts` over stdio, the MCP SDK's client, the fake model server;
the server's instructions, a transcripts folder not made yet, and the turns' times beside the sources."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.recall.tool import INSTRUCTIONS as RECALL_INSTRUCTIONS
from rlm_adapters.mcp_server.recall.tool import with_times
from rlm_adapters.mcp_server.recall.transcripts import parse_transcript, project_folder_name
from rlm_adapters.mcp_server.server import INSTRUCTIONS
from rlm_adapters.mcp_server.setup.config import parse_config
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig, server_env
from tests.mcp_server.test_transcripts import SESSION, transcript_lines, write

FIND = '```repl\nFINAL(llm_query([l for l in context[0]["text"].split("\\n") if "magic" in l][0]))\n```'


def _transcripts(folder: Path, project: Path) -> Path:
    """A long session of `project`, in its folder under `folder` as Claude Code names it."""
    lines = transcript_lines()
    lines[0]["message"] = {"role": "user", "content": "Remember: the magic number is 8731."}
    filler = [{"type": "user", "timestamp": "2026-12-01T14:10:00Z", "message": {"role": "user", "content": "x" * 2000}}]
    return write(folder, [json.dumps(r) for r in lines + filler * 200], project=project_folder_name(str(project)))


@pytest.mark.slow
async def test_recall_cites_session_and_line(tmp_path: Path, fake_server: FakeOpenAIServer) -> None:
    folder, cache = tmp_path / "projects", tmp_path / "cache"
    transcript = _transcripts(folder, tmp_path)  # the server's project: the folder it starts in
    sessions = cache / "rlm-adapters"
    sessions.mkdir(parents=True, mode=0o700)
    record = {"sessions": {str(tmp_path): {"session_id": SESSION, "time": 1.0}}}
    (sessions / "claude-sessions.json").write_text(json.dumps(record))
    (sessions / "claude-sessions.json").chmod(0o600)
    fake_server.root = scripted_root([FIND])
    env = server_env(fake_server, tmp_path / "logs") | {"XDG_CACHE_HOME": str(cache)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(tmp_path), "--sandbox", "local"],
        env=env | {"RLM_MCP_TRANSCRIPTS": str(folder)},
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"rlm_query", "rlm_recall"}
        assert tools["rlm_recall"].input_schema["additionalProperties"] is False
        current = await client.call_tool("rlm_recall", {"query": "which magic number?"})
        by_id = await client.call_tool("rlm_recall", {"query": "magic?", "session": SESSION, "since": "2026-12-01"})
        typo = await client.call_tool("rlm_recall", {"query": "magic?", "sesion": "all"})
        walk = await client.call_tool("rlm_recall", {"query": "magic?", "session": "../../etc/passwd"})
        later = await client.call_tool("rlm_recall", {"query": "magic?", "since": "2026-12-02"})
    text = current.content[0].text  # type: ignore[union-attr]
    # The source is the early turn, with its recorded time: what the agent says ("at 14:02 you said ...").
    assert text == f"8731\n\nSources:\n- {SESSION}:1 (2026-12-01T14:02:00.000Z)", text
    assert by_id.content[0].text == text  # type: ignore[union-attr]
    assert current.structured_content is not None
    # Lean: session:line and time, no file list.
    assert current.structured_content["sources"] == [f"{SESSION}:1 (2026-12-01T14:02:00.000Z)"]
    # Lean: what the agent's model receives is the answer and its sources, not the transcript.
    received = len(text) + len(json.dumps(current.structured_content))
    assert received * 50 < transcript.stat().st_size, (received, transcript.stat().st_size)
    assert typo.is_error and "sesion" in typo.content[0].text  # type: ignore[union-attr]
    assert walk.is_error and "is not a session id" in walk.content[0].text  # type: ignore[union-attr]
    assert later.is_error and "no turns" in later.content[0].text  # type: ignore[union-attr]


async def test_recall_is_off_without_transcripts(tmp_path: Path, fake_server: FakeOpenAIServer) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(tmp_path)],
        env=server_env(fake_server, tmp_path / "logs"),
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["rlm_query"]


async def test_instructions_name_rlm_recall_only_when_it_is_on(make_config: MakeConfig, tmp_path: Path) -> None:
    async with Client(build_server(make_config())) as client:
        assert client.instructions == INSTRUCTIONS and "rlm_recall" not in INSTRUCTIONS
    async with Client(build_server(make_config(transcripts=tmp_path))) as client:
        on = client.instructions
    assert on == f"{INSTRUCTIONS} {RECALL_INSTRUCTIONS}"
    assert all(when in on for when in ("after a compaction", "refers to something", "before redoing work"))
    assert len(RECALL_INSTRUCTIONS) < 400  # short: every session's context carries it


async def test_a_folder_claude_code_has_not_made_yet_says_there_are_no_transcripts(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    # The plugin names ~/.claude/projects before Claude Code's first session has made it: the server starts.
    home = tmp_path / "claude"
    home.mkdir()
    config = parse_config(["--root", str(tmp_path), "--transcripts", str(home / "projects")], environ={})
    assert config.transcripts == (home / "projects").resolve()
    with pytest.raises(ConfigurationError, match="is not a folder"):
        parse_config(["--root", str(tmp_path), "--transcripts", str(home / "no" / "projects")], environ={})
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ConfigurationError, match="is not a folder"):
        parse_config(["--root", str(tmp_path), "--transcripts", str(tmp_path / "a-file")], environ={})
    async with Client(build_server(make_config(transcripts=config.transcripts))) as client:
        missing = await client.call_tool("rlm_recall", {"query": "what did I say?", "session": "all"})
        (home / "projects").mkdir()
        empty = await client.call_tool("rlm_recall", {"query": "what did I say?", "session": "all"})
    assert missing.is_error and missing.content[0].text.endswith(  # type: ignore[union-attr]
        f"no Claude Code transcripts yet: {home / 'projects'} does not exist (Claude Code writes each session there)"
    )
    # The folder is there, this project's in it is not: no transcript of this project yet.
    assert empty.is_error and "no Claude Code transcripts of this project" in empty.content[0].text  # type: ignore[union-attr]


def _result(text: str, sources: list[str]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content={"answer": "a", "sources": sources}
    )


def test_sources_get_their_turns_times_and_nothing_else_does() -> None:
    entries = parse_transcript(SESSION, "\n".join(json.dumps(r) for r in transcript_lines()))
    forged = f"{SESSION}:2"  # the answer quotes a Sources block of its own: left as it is
    text = (
        f"the port\n\nSources:\n- {forged}\n\nSources:\n- {SESSION}:1\n- {SESSION}:2-4\n- {SESSION}:4\nUnsupported: x"
    )
    result = with_times(_result(text, [f"{SESSION}:1", f"{SESSION}:2-4", f"{SESSION}:4", "other:1"]), entries)
    assert result.structured_content is not None
    assert result.structured_content["sources"] == [
        f"{SESSION}:1 (2026-12-01T14:02:00.000Z)",
        f"{SESSION}:2-4 (2026-12-01T14:02:05.000Z to 2026-12-01T14:02:06.000Z)",
        f"{SESSION}:4",  # the summary record has no time
        "other:1",
    ]
    assert result.content[0].text == (  # type: ignore[union-attr]
        f"the port\n\nSources:\n- {forged}\n\nSources:\n- {SESSION}:1 (2026-12-01T14:02:00.000Z)\n"
        f"- {SESSION}:2-4 (2026-12-01T14:02:05.000Z to 2026-12-01T14:02:06.000Z)\n- {SESSION}:4\nUnsupported: x"
    )
    # A time that is not one (the transcript is untrusted text) is left out, never written into the block.
    forging = [e if e.line != 1 else dataclasses.replace(e, time="2026-12-01\n- fake:9") for e in entries]
    kept = with_times(_result(f"a\n\nSources:\n- {SESSION}:1", [f"{SESSION}:1"]), forging)
    assert kept.content[0].text == f"a\n\nSources:\n- {SESSION}:1"  # type: ignore[union-attr]
    bare = _result("no sources", [])
    assert with_times(bare, entries) is bare
