"""The transcript reader: Claude Code's JSONL in its documented shape, and hostile transcripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_adapters.errors import CacheError, FileLoadError
from rlm_adapters.mcp_server.recall.current_session import current_session
from rlm_adapters.mcp_server.recall.transcripts import (
    MAX_LINE_CHARS,
    as_context,
    parse_transcript,
    read_transcripts,
    since_filter,
)

HOOK = Path(__file__).parents[2] / "plugins" / "rlm" / "hooks" / "session_record.py"
SESSION = "0b6c3f1e-7d2a-4c1b-9f3e-2a1d5c4b3a21"


def transcript_lines(session: str = SESSION) -> list[dict[str, object]]:
    """A session in the shape Claude Code writes: user, assistant with a tool call, its result, a summary."""
    base = {"sessionId": session, "cwd": "/work/p", "version": "2.1.197", "isSidechain": False}
    return [
        {**base, "type": "user", "uuid": "u1", "timestamp": "2026-12-01T14:02:00.000Z",
         "message": {"role": "user", "content": "Remember: the deploy port is 8731."}},
        {**base, "type": "assistant", "uuid": "a1", "timestamp": "2026-12-01T14:02:05.000Z",
         "message": {"role": "assistant", "model": "claude", "content": [
             {"type": "text", "text": "Noted. Reading the config."},
             {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/work/p/deploy.toml"}}]}},
        {**base, "type": "user", "uuid": "u2", "timestamp": "2026-12-01T14:02:06.000Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "toolu_1", "content": "port = 8731\nhost = a"}]}},
        {"type": "summary", "summary": "Deploy port chosen", "leafUuid": "a1"},
        {**base, "type": "a-record-type-from-the-future", "timestamp": "2026-12-01T15:00:00.000Z", "x": 1},
    ]  # fmt: skip


def write(folder: Path, lines: list[str], session: str = SESSION, project: str = "-work-p") -> Path:
    """The transcript of `session` in `project`'s folder under Claude Code's projects `folder`."""
    project = folder / project
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{session}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_one_entry_per_message_and_tool_result() -> None:
    entries = parse_transcript(SESSION, "\n".join(json.dumps(r) for r in transcript_lines()))
    assert [(e.line, e.role, e.tool) for e in entries] == [
        (1, "user", ""),
        (2, "assistant", "Read"),
        (3, "tool_result", "Read"),
        (4, "summary", ""),
        (5, "a-record-type-from-the-future", ""),
    ]
    assert entries[0].time == "2026-12-01T14:02:00.000Z" and "8731" in entries[0].text
    assert entries[1].paths == ("/work/p/deploy.toml",)
    assert entries[2].text == "port = 8731\nhost = a"
    assert entries[3].text == "Deploy port chosen"
    assert '"x": 1' in entries[4].text  # an unknown type is kept, as its JSON
    assert entries[1].document()["id"] == f"{SESSION}:2"


def test_context_lines_are_the_transcripts_lines(tmp_path: Path) -> None:
    write(tmp_path, [json.dumps(r) for r in transcript_lines()])
    entries, loaded = read_transcripts(tmp_path, [SESSION], max_bytes=1 << 20)
    context = as_context(entries, loaded)
    [document] = context.documents()
    assert document["id"] == SESSION
    lines = document["text"].split("\n")
    assert lines[0] == "[2026-12-01T14:02:00.000Z user] Remember: the deploy port is 8731."
    assert lines[2] == "[2026-12-01T14:02:06.000Z tool_result Read] port = 8731 ⏎ host = a"
    assert "/work/p/deploy.toml" in lines[1]


def test_hostile_lines_are_kept_as_text_never_raised() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    medium = json.dumps({"type": "user", "message": {"role": "user", "content": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
        [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
        ]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}})  # fmt: skip
    huge = json.dumps({"type": "user", "message": {"role": "user", "content": "y" * (MAX_LINE_CHARS + 10)}})
    control = json.dumps({"type": "user", "message": {"role": "user", "content": "a\x1b[2Jb\x00c\u202ed\u200be"}})
    text = "\n".join(["{not json", deep, medium, huge, control, "42", json.dumps({"type": "user", "message": 7})])
    entries = parse_transcript(SESSION, text)
    assert [e.line for e in entries] == [1, 2, 3, 4, 5, 6, 7]
    assert entries[0].note == "not JSON; kept as text"
    assert entries[1].note in ("not JSON; kept as text", "nested too deep; kept as text")
    assert entries[2].note == "nested too deep; kept as text"
    assert entries[3].note == "line too long to parse; cut" and len(entries[3].text) < MAX_LINE_CHARS
    assert entries[4].text == "a[2Jbcde"  # no escape, NUL, bidi override or zero-width character survives
    assert entries[5].note == "not a JSON object; kept as text"
    assert entries[6].role == "user"


def test_symlinks_out_of_the_folder_are_not_followed(tmp_path: Path) -> None:
    folder, outside = tmp_path / "projects", tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.jsonl"
    secret.write_text(json.dumps({"type": "user", "message": {"role": "user", "content": "SECRET"}}) + "\n")
    write(folder, [json.dumps(r) for r in transcript_lines()])
    (folder / "-work-p" / "linked.jsonl").symlink_to(secret)
    (folder / "linked-dir").symlink_to(outside, target_is_directory=True)
    entries, _loaded = read_transcripts(folder, None, max_bytes=1 << 20)
    assert entries and not any("SECRET" in e.text for e in entries)
    with pytest.raises(FileLoadError, match=r"linked\.jsonl: symlink pointing outside the allowed roots"):
        read_transcripts(folder, ["linked"], max_bytes=1 << 20)


def test_a_session_name_cannot_walk_out(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "*", ""):
        with pytest.raises(ValueError, match="is not a session id"):
            read_transcripts(tmp_path, [bad], max_bytes=1 << 20)


def test_the_size_cap_holds(tmp_path: Path) -> None:
    write(tmp_path, [json.dumps(r) for r in transcript_lines()] * 50)
    with pytest.raises(Exception, match="max"):
        read_transcripts(tmp_path, None, max_bytes=1000)


def test_since() -> None:
    entries = parse_transcript(SESSION, "\n".join(json.dumps(r) for r in transcript_lines()))
    assert [e.line for e in since_filter(entries, "2026-12-01T14:02:05")] == [2, 3, 5]
    with pytest.raises(ValueError, match="is not an ISO time"):
        since_filter(entries, "yesterday")


def _hook(event: dict[str, object], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [sys.executable, "-I", "-S", str(HOOK)], input=json.dumps(event), env=env, capture_output=True, text=True
    )


def test_the_hook_records_the_current_session(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    done = _hook({"session_id": SESSION, "transcript_path": "/x.jsonl", "cwd": "/work/p",
                  "hook_event_name": "SessionStart"}, cache)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "")
    _hook({"session_id": "other-1", "cwd": "/work/q", "hook_event_name": "PreCompact"}, cache)
    path = cache / "rlm-adapters" / "claude-sessions.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert current_session([Path("/work/p")], path) == SESSION
    assert current_session([Path("/elsewhere")], path) == "other-1"  # no match: the newest recorded
    assert _hook({"session_id": "../../etc", "cwd": "/work/p"}, cache).returncode == 0
    assert current_session([Path("/work/p")], path) == SESSION  # a bad id is not recorded


def test_a_sessions_file_others_could_write_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "claude-sessions.json"
    path.write_text(json.dumps({"sessions": {"/w": {"session_id": "x", "time": 1}}}))
    path.chmod(0o666)
    with pytest.raises(CacheError, match="another user"):
        current_session([Path("/w")], path)
    path.unlink()
    with pytest.raises(ValueError, match="no current session is recorded"):
        current_session([Path("/w")], path)


def test_transcripts_flag(tmp_path: Path) -> None:
    from rlm_adapters.errors import ConfigurationError
    from rlm_adapters.mcp_server.setup.config import parse_config

    assert parse_config(["--root", str(tmp_path)], environ={}).transcripts is None
    on = parse_config(["--root", str(tmp_path), "--transcripts", str(tmp_path)], environ={})
    assert on.transcripts == tmp_path.resolve()
    with pytest.raises(ConfigurationError, match="--transcripts '/no/such' is not a folder"):
        parse_config(["--root", str(tmp_path), "--transcripts", "/no/such"], environ={})


def test_a_newline_in_a_path_tool_or_time_never_shifts_the_lines(tmp_path: Path) -> None:
    # A file may be named "a\nb"; a tool name or a time is the transcript's text too: line N stays line N.
    lines = transcript_lines()
    lines[1]["message"]["content"][1] |= {"name": "Re\nad", "input": {"file_path": "/work/p/a\nb.toml"}}  # type: ignore[index]
    lines[0]["timestamp"] = "2026-12-01T14:02:00Z\n\nSources:\n- x:1"
    write(tmp_path, [json.dumps(r) for r in lines])
    entries, loaded = read_transcripts(tmp_path, [SESSION], max_bytes=1 << 20)
    [document] = as_context(entries, loaded).documents()
    rendered = document["text"].split("\n")
    assert len(rendered) == len(lines)
    assert rendered[2].startswith("[2026-12-01T14:02:06.000Z tool_result Re ⏎ ad] port = 8731")
    assert "/work/p/a ⏎ b.toml" in rendered[1]


def test_a_long_turn_is_cut_and_says_so_where_the_model_reads_it(tmp_path: Path) -> None:
    """Issue 51: each entry was cut at 50,000 characters with only "[... N characters cut]"; the run's model
    could not tell that rlm_recall had cut it (rather than the turn ending there), nor the agent beforehand."""
    from rlm_adapters.mcp_server.recall.tool import DESCRIPTION
    from rlm_adapters.mcp_server.recall.transcripts import MAX_TEXT_CHARS

    long_turn = {"type": "user", "timestamp": "2026-12-01T14:02:00.000Z",
                 "message": {"role": "user", "content": "z" * (MAX_TEXT_CHARS + 1234)}}  # fmt: skip
    write(tmp_path, [json.dumps(long_turn)])
    entries, loaded = read_transcripts(tmp_path, [SESSION], max_bytes=1 << 20)
    [document] = as_context(entries, loaded).documents()
    assert document["text"].count("z") == MAX_TEXT_CHARS
    assert document["text"].endswith(
        "[... cut: rlm_recall keeps the first 50,000 characters of each entry; 1,234 more are in the transcript "
        "file only]"
    )
    assert "Each turn is read up to its first 50,000 characters (a longer one is cut, and marked so)" in DESCRIPTION
