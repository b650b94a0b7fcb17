"""The background runs of a server with ``--cache``, kept beside the cache so that they outlive the server.

Each run is written to ``FILE.runs.json`` (beside ``--cache FILE``; `private_file` checks it and merges each
server's writes) when it starts, with its principal and the call's arguments, and again when it ends, with its
result. A later server (a restart; over stdio, the next client's server) asked for the id by the same
principal returns a finished result as it was, and runs an unfinished one again: every model call that had
come back replays from the cache, and the run goes on from the first that had not. A cancelled run is not run
again. Results are kept as long and as many as the server's `RunLimits` say.
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
from rlm_adapters.mcp_server.private_file import read_private_json, update_private_json

logger = logging.getLogger("rlm_adapters.mcp_server")

FORMAT = "rlm-mcp-runs"
VERSION = 1
MAX_FILE_BYTES = 256 << 20
State = Literal["working", "done", "failed", "cancelled"]
STATES = ("working", "done", "failed", "cancelled")
ARGUMENTS = frozenset(
    {"query", "paths", "text", "model", "sub_model", "max_depth", "max_cost", "timeout", "session", "output_schema"}
)


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
    """The runs file of one server (other servers sharing the cache may write theirs to it too).

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
        self._read()  # refused now, at start, rather than at the first run

    def find(self, principal: str, run_id: str) -> StoredRun | None:
        """`principal`'s run `run_id`, if the file has it (and it has not expired); read afresh, so that a run
        another server sharing the cache wrote is found too."""
        with self._lock:
            runs = self._read()
        self._expire(runs)
        stored = runs.get(run_id)
        return stored if stored is not None and stored.principal == principal else None

    def started(self, run_id: str, principal: str, arguments: Mapping[str, Any]) -> None:
        """A run started (or started again): written down before it does any work."""
        stored = StoredRun(principal, {k: arguments.get(k) for k in ARGUMENTS})
        self._update(lambda runs: runs.__setitem__(run_id, stored))

    def ended(self, run_id: str, state: State, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        """A run ended: its result (or error, or cancellation) replaces its arguments' record."""
        finished = self._clock()

        def end(runs: dict[str, StoredRun]) -> None:
            stored = runs.get(run_id)
            if stored is not None:
                stored.state, stored.result, stored.error, stored.finished = state, result, error, finished

        self._update(end)

    def _read(self) -> dict[str, StoredRun]:
        data = read_private_json(self.path, MAX_FILE_BYTES)
        return self._parse(data)

    def _parse(self, data: Any) -> dict[str, StoredRun]:
        try:
            return _runs(data) if data is not None else {}
        except (ValueError, TypeError, KeyError) as exc:
            raise CacheError(str(self.path), f"is not an rlm-mcp runs file ({type(exc).__name__})") from None

    def _update(self, change: Callable[[dict[str, StoredRun]], None]) -> None:
        def update(data: Any) -> dict[str, Any]:
            runs = self._parse(data)
            change(runs)
            self._expire(runs)
            return {"format": FORMAT, "version": VERSION, "runs": {k: vars(v) for k, v in runs.items()}}

        with self._lock:
            try:
                update_private_json(self.path, MAX_FILE_BYTES, update)
            except (OSError, CacheError):
                # The run goes on; only a later server would miss it.
                logger.warning("could not write the runs file %s", self.path, exc_info=True)

    def _expire(self, runs: dict[str, StoredRun]) -> None:
        now = self._clock()
        ended = sorted((r.finished or 0.0, run_id) for run_id, r in runs.items() if r.state != "working")
        extra = len(ended) - self.keep_results
        for index, (finished, run_id) in enumerate(ended):
            if index < extra or now - finished > self.keep_seconds:
                del runs[run_id]


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
