"""Transcripts that the pinned Claude Code really writes, read by `rlm_recall`'s reader; and its session hook
fed by a real SessionStart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlm_adapters.mcp_server.recall.current_session import current_session
from rlm_adapters.mcp_server.recall.transcripts import as_context, read_transcripts
from tests.mcp_server.claude import claude, claude_env, needs_claude
from tests.plugin.fake_messages_api import ANSWER, messages_api

HOOK = Path(__file__).parents[2] / "plugins" / "rlm" / "hooks" / "session_record.py"


@pytest.mark.slow  # a real Claude Code (or server) start: 13-20 s on a busy 2-core machine
@needs_claude
def test_a_real_session_transcript_reads_as_entries(tmp_path: Path) -> None:
    home, project, cache = tmp_path / "home", tmp_path / "project", tmp_path / "cache"
    (home / ".claude").mkdir(parents=True)
    project.mkdir()
    hook = {"type": "command", "command": f"{sys.executable} -I -S {HOOK}"}
    settings = {"hooks": {"SessionStart": [{"hooks": [hook]}]}}
    (home / ".claude" / "settings.json").write_text(json.dumps(settings))
    big = project / "big.log"
    big.write_text("MARKER-LINE 12345\n" * 30)
    with messages_api(str(big)) as (url, _requests):
        env = claude_env(home, ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-not-used", XDG_CACHE_HOME=str(cache))
        done = claude(["-p", "Read big.log", "--output-format", "json"], env, project, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    session = json.loads(done.stdout)["session_id"]
    entries, loaded = read_transcripts(home / ".claude" / "projects", [session], max_bytes=1 << 24)
    roles = [e.role for e in entries]
    assert "unparsed" not in roles, [e for e in entries if e.role == "unparsed"]
    assert any(e.role == "user" and "Read big.log" in e.text for e in entries)
    [call] = [e for e in entries if e.tool == "Read" and e.role == "assistant"]
    assert call.paths == (str(big),) and call.time.startswith("20")
    [result] = [e for e in entries if e.role == "tool_result"]
    assert result.tool == "Read" and "MARKER-LINE 12345" in result.text
    assert any(e.role == "assistant" and ANSWER in e.text for e in entries)
    [document] = as_context(entries, loaded).documents()
    assert document["id"] == session
    # The real SessionStart hook input named this session, under the project's folder.
    recorded = cache / "rlm-adapters" / "claude-sessions.json"
    assert current_session([project.resolve()], recorded) == session
