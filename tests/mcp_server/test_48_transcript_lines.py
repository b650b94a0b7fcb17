"""Issue 48, item 11: a transcript's line N is the file's Nth "\\n" line, whatever its text holds.

Claude Code's JSON writer leaves U+2028, U+2029 and U+0085 raw inside strings. Split with `str.splitlines`,
three U+2028 in one tool result cut that record into four "lines" that are not JSON, and every later turn moved
down three: the turn at file line 4 was cited as ``session:7``.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp import Client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.recall.transcripts import (
    as_context,
    parse_transcript,
    project_folder_name,
    read_transcripts,
)
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig
from tests.mcp_server.test_transcripts import SESSION, transcript_lines, write

SEPARATED = "first\u2028second\u2028third\u2028fourth"  # a tool result with three raw U+2028
# Finds the turn with the number the way a model's code may: `splitlines`, then cites where it found it.
FIND = '```repl\nFINAL(llm_query([l for l in context[0]["text"].splitlines() if "8731" in l][0]))\n```'


def separated_transcript() -> list[str]:
    """Claude Code's lines: user, assistant calling a tool, the tool's result with three U+2028 (line 3), then
    the user's next turn stating the number (line 4)."""
    lines = transcript_lines()[:3]
    lines[0]["message"] = {"role": "user", "content": "Read the file."}
    lines[2]["message"]["content"][0]["content"] = SEPARATED  # type: ignore[index]
    said = "The deploy port is 8731.\u2029\u0085Noted\u2028."
    later = {"type": "user", "timestamp": "2026-12-01T14:03:00.000Z", "message": {"role": "user", "content": said}}
    return [json.dumps(r, ensure_ascii=False) for r in [*lines, later]]


def test_the_reader_numbers_lines_by_newlines_only(tmp_path: Path) -> None:
    text = "\n".join(separated_transcript())
    assert "\u2028" in text and len(text.splitlines()) == 10  # what the old reader saw: ten lines
    entries = parse_transcript(SESSION, text)
    assert [(e.line, e.role) for e in entries] == [(1, "user"), (2, "assistant"), (3, "tool_result"), (4, "user")]
    assert entries[2].text == SEPARATED and not any(e.note for e in entries)
    write(tmp_path, separated_transcript())
    [document] = as_context(*read_transcripts(tmp_path, [SESSION], max_bytes=1 << 20)).documents()
    # The context's lines are the file's for any reader: no character `splitlines` breaks at is left in it.
    assert document["text"].splitlines() == document["text"].split("\n")
    assert len(document["text"].split("\n")) == 4
    assert document["text"].split("\n")[3].startswith("[2026-12-01T14:03:00.000Z user] The deploy port is 8731.")


async def test_the_next_turns_citation_keeps_its_line(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    projects, project = tmp_path / "projects", tmp_path / "app"
    project.mkdir()
    write(projects, separated_transcript(), project=project_folder_name(str(project)))
    fake_server.root = scripted_root([FIND])
    async with Client(build_server(make_config(transcripts=projects, project=project))) as client:
        result = await client.call_tool("rlm_recall", {"query": "which port?", "session": SESSION})
    assert not result.is_error, result
    assert result.structured_content is not None
    assert result.structured_content["sources"] == [f"{SESSION}:4 (2026-12-01T14:03:00.000Z)"]
