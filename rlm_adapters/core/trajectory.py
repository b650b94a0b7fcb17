"""The trajectory log: one JSONL file per run, one record per event.

The first line is a header (run id, configuration, a description of the context); every later line is
one event of the run or of a nested run. Root calls carry only the messages new since the previous turn,
long fields are cut at `max_field_chars`, and the context itself is never written, so a log's size grows
with the number of events and not with the size of the input.

A log still holds the query and what the cells printed (file contents, a key pasted into a prompt), so it is
private: each file is created 0600, never through a link, and a folder the logger makes is 0700 (issue 48: the
MCP server's default folder was 0755 with 0644 files, and another user grepped a pasted key out of one).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Any

from rlm_adapters.core.events import Event

LOG_VERSION = 1
# The record an adapter appends once a run's sources and claims are known (after its last event): its
# "type" and its "kind" are both this, so readers that list the events' kinds see it for what it is.
SOURCES_RECORD = "sources"


class RunLog:
    """The open log of one run: a file, or (with no path) a list of records kept in memory."""

    def __init__(self, path: Path | None, max_field_chars: int) -> None:
        self.path = path
        self.max_field_chars = max_field_chars
        self._lock = threading.Lock()
        self._handle: IO[str] | None = _open_private(path, truncate=True) if path is not None else None
        self.records: list[dict[str, Any]] | None = [] if path is None else None

    def write(self, record: dict[str, Any]) -> None:
        """Append one record."""
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            if self.records is not None:
                self.records.append(json.loads(line))  # the same JSON-safe copy a file would hold
            if self._handle is not None:
                self._handle.write(line + "\n")
                self._handle.flush()

    def event(self, event: Event) -> None:
        """Append one event, with its long fields cut (not the answer's streamed pieces: the root call that
        follows them holds the whole reply, and a record per token would make the log as long as the answer
        times its record's size)."""
        if event.kind == "answer_delta":
            return
        record = event.to_dict(max_chars=self.max_field_chars)
        record["type"] = "event"
        self.write(record)

    def close(self) -> None:
        """Close the file (later writes are dropped)."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def trajectory(self) -> dict[str, Any] | None:
        """An in-memory log as ``{"header": {...}, "events": [...]}`` (None for a file log)."""
        if self.records is None:
            return None
        with self._lock:
            records = list(self.records)
        header = next((r for r in records if r.get("type") == "header"), {})
        return {"header": header, "events": [r for r in records if r.get("type") != "header"]}


class RLMLogger:
    """Writes one JSONL trajectory per run into `log_dir`, or keeps it in memory.

    Args:
        log_dir: The folder for the logs (created if missing). None (the default, as in the reference
            RLM) writes no file: each run's trajectory is in ``result.metadata["trajectory"]``.
        max_field_chars: Where long prompts, replies and outputs are cut in the log.
    """

    def __init__(self, log_dir: str | Path | None = None, *, max_field_chars: int = 4000) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.max_field_chars = max_field_chars

    def open_run(self, run_id: str, header: dict[str, Any]) -> RunLog:
        """Create the log of a new run (a file, or a list in memory) and write its header."""
        path: Path | None = None
        if self.log_dir is not None:
            os.makedirs(self.log_dir, mode=0o700, exist_ok=True)  # an existing folder keeps its owner's choice
            stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime())
            path = self.log_dir / f"rlm_{stamp}_{run_id[:8]}.jsonl"
        log = RunLog(path, self.max_field_chars)
        log.write({"type": "header", "version": LOG_VERSION, "run_id": run_id, "time": time.time(), **header})
        return log

    def find(self, trajectory_id: str) -> Path | None:
        """The log file of a run id (or a unique prefix of it) in this folder."""
        if self.log_dir is None:
            return None
        prefix = trajectory_id[:8]
        for path in sorted(self.log_dir.glob(f"rlm_*_{prefix}.jsonl"), reverse=True):
            with path.open(encoding="utf-8") as handle:
                first = json.loads(handle.readline() or "{}")
            if str(first.get("run_id", "")).startswith(trajectory_id):
                return path
        return None


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record to a finished run's log (as `RunLog.write` would have written it)."""
    line = json.dumps(record, ensure_ascii=False, default=str)
    with _open_private(Path(path), truncate=False) as handle:
        handle.write(line + "\n")


def _open_private(path: Path, *, truncate: bool) -> IO[str]:
    """`path` open for writing (emptied, or at its end), as a 0600 file of this user's; a link is never followed.

    A new file is created 0600. A file already there (a run resumed under its own id within the same second) is
    used only if it is a plain file of this user's with one name, so a link or a hard link planted at the name
    in a shared folder cannot point the log at another file.

    Raises:
        OSError: The name holds a link, another user's file, or a file with other names.
    """
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if truncate else os.O_APPEND)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = os.open(path, flags)  # ELOOP for a link
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
            os.close(fd)
            raise PermissionError(
                f"the trajectory log {str(path)!r} is already there and is not a plain file of this user's "
                "with one name; remove it, or give the logger a folder only you can write"
            ) from None
        os.fchmod(fd, 0o600)
        if truncate:
            os.ftruncate(fd, 0)
    # Model code can print lone surrogates: they are written escaped rather than dropping the event.
    return open(fd, "w" if truncate else "a", encoding="utf-8", errors="backslashreplace")


def new_run_id() -> str:
    """A fresh run id."""
    return uuid.uuid4().hex


def read_trajectory(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and event records of a log (a torn last line from a live run is skipped)."""
    header: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("type") == "header":
                header = record
            else:
                events.append(record)
    return header, events
