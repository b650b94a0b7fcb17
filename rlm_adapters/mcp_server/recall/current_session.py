"""Which Claude Code session is "current" for `rlm_recall`: the one the plugin's hooks wrote down.

The plugin's SessionStart and PreCompact hook (``hooks/session_record.py``) records each session's id under
its working folder in ``<user cache>/rlm-adapters/claude-sessions.json``. That file is read here only once it
is known to be this user's own (`private_file.read_private_json`: a regular file, this user's, not writable
by others), and only the id is taken from it: the transcript itself is always looked up under the server's
``--transcripts`` folder, never at a path the file names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlm_adapters.mcp_server.private_file import read_private_json
from rlm_adapters.mcp_server.recall.transcripts import check_session

MAX_BYTES = 1 << 20


def sessions_file(environ: dict[str, str] | None = None) -> Path:
    """Where the hook records sessions (the same path as ``hooks/session_record.py``)."""
    env = os.environ if environ is None else environ
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rlm-adapters" / "claude-sessions.json"


def current_session(folders: Sequence[Path], path: Path | None = None) -> str:
    """The id of the session recorded for the first of `folders` that has one, else the newest recorded.

    Raises:
        CacheError: the file could have been written by another user, or is not JSON.
        ValueError: no session is recorded (the hook has not run), or the id recorded is not one.
    """
    data: Any = read_private_json(path or sessions_file(), MAX_BYTES)
    sessions = data.get("sessions") if isinstance(data, dict) else None
    if not isinstance(sessions, dict) or not sessions:
        raise ValueError(
            "no current session is recorded (the rlm plugin's SessionStart hook writes it); "
            "pass session=<id> or session='all'"
        )
    good = {k: v for k, v in sessions.items() if isinstance(v, dict) and isinstance(v.get("session_id"), str)}
    for folder in folders:
        if (entry := good.get(str(folder))) is not None:
            return check_session(entry["session_id"])
    if not good:
        raise ValueError("the recorded sessions name no session id; pass session=<id> or session='all'")
    newest = max(good.values(), key=lambda v: v.get("time", 0) if isinstance(v.get("time"), int | float) else 0)
    return check_session(newest["session_id"])


__all__ = ["current_session", "sessions_file"]
