"""`rlm_recall` end to end: `rlm-mcp --transcripts` over stdio, the MCP SDK's client, the fake model server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import server_env
from tests.mcp_server.test_transcripts import SESSION, transcript_lines, write

FIND = '```repl\nFINAL(llm_query([l for l in context[0]["text"].split("\\n") if "magic" in l][0]))\n```'


def _transcripts(folder: Path) -> Path:
    lines = transcript_lines()
    lines[0]["message"] = {"role": "user", "content": "Remember: the magic number is 8731."}
    filler = [{"type": "user", "timestamp": "2026-12-01T14:10:00Z", "message": {"role": "user", "content": "x" * 2000}}]
    return write(folder, [json.dumps(r) for r in lines + filler * 200])


async def test_recall_cites_session_and_line(tmp_path: Path, fake_server: FakeOpenAIServer) -> None:
    folder, cache = tmp_path / "projects", tmp_path / "cache"
    transcript = _transcripts(folder)
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
    assert text == f"8731\n\nSources:\n- {SESSION}:1", text
    assert by_id.content[0].text == text  # type: ignore[union-attr]
    assert current.structured_content is not None
    assert current.structured_content["sources"] == [f"{SESSION}:1"]  # lean: session:line, no file list
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
