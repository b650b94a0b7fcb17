"""The rlm plugin's SessionStart and PreCompact hook: write down which Claude Code session is current.

Claude Code hands a hook the session's ``session_id``, ``transcript_path`` and ``cwd`` on stdin. This
records them in ``$XDG_CACHE_HOME/rlm-adapters/claude-sessions.json`` (a folder ``0700``, a file ``0600``,
replaced atomically, never through a link), keyed by ``cwd``, so that ``rlm_recall(session="current")`` on
the rlm MCP server (`rlm_adapters.mcp_server.recall.current_session`) finds the session that calls it. Only the id
is used by the server; a transcript is always read from under its ``--transcripts`` folder.

It never blocks: whatever happens it exits 0 and prints nothing. Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any

MAX_INPUT = 1 << 20
MAX_FILE = 1 << 20
MAX_SESSIONS = 64  # the most recent cwds kept
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def sessions_file() -> Path:
    """Where the sessions are recorded (the server reads the same path)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rlm-adapters" / "claude-sessions.json"


def _own(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(path: Path) -> dict[str, Any]:
    try:
        info = os.lstat(path)
    except OSError:
        return {}
    if not stat.S_ISREG(info.st_mode) or not _own(info) or info.st_size > MAX_FILE:
        raise PermissionError(str(path))  # someone else's file: leave it, record nothing
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as handle:
        try:
            data = json.load(handle)
        except ValueError:
            return {}
    return data if isinstance(data, dict) else {}


def record(event: dict[str, Any], path: Path) -> bool:
    """Record `event`'s session under its cwd in `path`; False when the event is not one to record."""
    session, cwd = event.get("session_id"), event.get("cwd")
    transcript = event.get("transcript_path")
    if not isinstance(session, str) or not SESSION_ID.fullmatch(session) or not isinstance(cwd, str):
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not _own(os.lstat(path.parent)) or not stat.S_ISDIR(os.lstat(path.parent).st_mode):
        return False
    data = _read(path)
    entries = data.get("sessions") if isinstance(data.get("sessions"), dict) else {}
    entries[cwd] = {
        "session_id": session,
        "transcript_path": transcript if isinstance(transcript, str) else "",
        "event": str(event.get("hook_event_name", ""))[:64],
        "time": time.time(),
    }
    newest = sorted(entries.items(), key=lambda kv: kv[1].get("time", 0) if isinstance(kv[1], dict) else 0)
    data = {"version": 1, "sessions": dict(newest[-MAX_SESSIONS:])}
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(temporary, path)
    return True


def main() -> int:
    try:
        event = json.loads(sys.stdin.read(MAX_INPUT))
        if isinstance(event, dict):
            record(event, sessions_file())
    except Exception:  # a hook must never break the session
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
