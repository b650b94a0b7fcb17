"""The background runs of a server with ``--cache``, kept beside the cache so that they outlive the server.

Each run is written to ``FILE.runs.json`` (beside ``--cache FILE``; `private_file` checks and writes it) when it
starts, with its principal and the call's arguments, and again when it ends, with its result. A later server
(a restart; over stdio, the next client's server) asked for the id by the same principal returns a finished
result as it was, and runs an unfinished one again: every model call that had come back replays from the
cache, and the run goes on from the first that had not. A cancelled run is not run again. Results are kept
as long and as many as the server's `RunLimits` say.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.errors import CacheError
from rlm_adapters.mcp_server.private_file import read_private_json, write_private_json

logger = logging.getLogger("rlm_adapters.mcp_server")

FORMAT = "rlm-mcp-runs"
VERSION = 1
MAX_FILE_BYTES = 256 << 20
State = Literal["working", "done", "failed", "cancelled"]
STATES = ("working", "done", "failed", "cancelled")
ARGUMENTS = frozenset({"query", "paths", "text", "model", "sub_model", "max_depth", "max_cost", "timeout", "session"})


def runs_path(cache: Path) -> Path:
    """Where the background runs of a server with ``--cache cache`` are kept."""
    return cache.with_name(cache.name + ".runs.json")


@dataclass
class StoredRun:
    """One run as the file has it.

    Attributes:
        principal: Whose it is.
        arguments: The call's arguments (`ARGUMENTS`), to run it again.
        state: ``working`` (started, not ended: run again when asked), ``done`` (`result` is the tool's
            result as the wire has it), ``failed`` (`error` is its tool error) or ``cancelled``.
        result: The `CallToolResult` as JSON.
        error: The tool error's text.
        finished: When it ended (seconds since the epoch).
    """

    principal: str
    arguments: dict[str, Any]
    state: State = "working"
    result: dict[str, Any] | None = None
    error: str | None = None
    finished: float | None = None


class RunStore:
    """The runs file of one server.

    Args:
        path: The file (`runs_path` of the cache).
        keep_results: Ended runs kept (the oldest are forgotten first).
        keep_seconds: Seconds an ended run is kept.
        clock: Seconds since the epoch (a restart must read the same clock).

    Raises:
        CacheError: the file is not one this server wrote (naming it and why).
    """

    def __init__(
        self, path: Path, keep_results: int, keep_seconds: float, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.keep_results = keep_results
        self.keep_seconds = keep_seconds
        self._clock = clock
        self._lock = threading.Lock()
        data = read_private_json(path, MAX_FILE_BYTES)
        try:
            self._runs = _runs(data) if data is not None else {}
        except (ValueError, TypeError, KeyError) as exc:
            raise CacheError(str(path), f"is not an rlm-mcp runs file ({type(exc).__name__})") from None

    def find(self, principal: str, run_id: str) -> StoredRun | None:
        """`principal`'s run `run_id`, if the file has it (and it has not expired)."""
        with self._lock:
            self._expire()
            stored = self._runs.get(run_id)
            return stored if stored is not None and stored.principal == principal else None

    def started(self, run_id: str, principal: str, arguments: Mapping[str, Any]) -> None:
        """A run started (or started again): written down before it does any work."""
        with self._lock:
            self._runs[run_id] = StoredRun(principal, {k: arguments.get(k) for k in ARGUMENTS})
            self._save()

    def ended(self, run_id: str, state: State, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        """A run ended: its result (or error, or cancellation) replaces its arguments' record."""
        with self._lock:
            stored = self._runs.get(run_id)
            if stored is None:
                return
            stored.state, stored.result, stored.error, stored.finished = state, result, error, self._clock()
            self._expire()
            self._save()

    def _expire(self) -> None:
        now = self._clock()
        ended = sorted((r.finished or 0.0, run_id) for run_id, r in self._runs.items() if r.state != "working")
        extra = len(ended) - self.keep_results
        for index, (finished, run_id) in enumerate(ended):
            if index < extra or now - finished > self.keep_seconds:
                del self._runs[run_id]

    def _save(self) -> None:
        runs = {run_id: vars(stored) for run_id, stored in self._runs.items()}
        try:
            write_private_json(self.path, {"format": FORMAT, "version": VERSION, "runs": runs})
        except OSError:
            # The run goes on; only a restart would miss it.
            logger.warning("could not write the runs file %s", self.path, exc_info=True)


def _runs(data: Any) -> dict[str, StoredRun]:
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not this format or version")
    runs: dict[str, StoredRun] = {}
    for run_id, item in data["runs"].items():
        stored = StoredRun(**item)
        if not isinstance(run_id, str) or not isinstance(stored.principal, str) or stored.state not in STATES:
            raise TypeError("a run's id, principal or state")
        if not isinstance(stored.arguments, dict) or not set(stored.arguments) <= ARGUMENTS:
            raise TypeError("a run's arguments")
        if stored.result is not None and not isinstance(stored.result, dict):
            raise TypeError("a run's result")
        runs[run_id] = stored
    return runs


__all__ = ["ARGUMENTS", "RunStore", "StoredRun", "runs_path"]
