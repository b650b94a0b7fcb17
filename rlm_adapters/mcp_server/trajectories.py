"""The trajectory resources, ``rlm://trajectories`` and ``rlm://trajectories/{id}``, each client seeing its own.

A trajectory holds the run's query and what its cells printed (file contents among it), so it belongs to the
client that started the run (`identity.Client`):

- ``local`` (stdio, in-process): the user who started the server; every trajectory in the log folder is theirs.
- ``session`` (an HTTP MCP session): the runs started in that MCP session, listed and read by id or unique
  prefix; forgotten when the session ends.
- ``request`` (a session-less 2026-07-28 HTTP request): no listing; a run started by such a request is read
  by its full 32-digit id, which only its result carries.

Another client's run answers exactly as an unknown id does.

The folder is private like the rest of the user's cache (`private_log_dir`): each log is written 0600 by the
logger, and the server's default folder is made 0700 even where an older version left it 0755.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import stat
from collections import OrderedDict
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError

from rlm_adapters.core import RLMLogger, read_trajectory
from rlm_adapters.mcp_server.callers import Client, current_client

logger = logging.getLogger("rlm_adapters.mcp_server")

RECENT_LIMIT = 50
# Runs remembered per MCP session, and for session-less requests together (the oldest are forgotten).
RUNS_PER_CLIENT = 1000
SESSIONLESS_RUNS = 10_000
_TRAJECTORY_ID = re.compile(r"^[0-9a-f]{8,32}$")


class TrajectoryBook:
    """Which client started which run (in memory: a restarted server serves trajectories over stdio only)."""

    def __init__(self) -> None:
        self._by_session: dict[str, OrderedDict[str, None]] = {}
        self._sessionless: OrderedDict[str, None] = OrderedDict()

    def record(self, client: Client, run_id: str) -> None:
        """Note that `client` starts the run `run_id` (before it starts, so a live log is readable)."""
        if client.kind == "session":
            runs = self._by_session.get(client.key)
            if runs is None:
                runs = self._by_session[client.key] = OrderedDict()
                client.on_end(self.forget)
            _remember(runs, run_id, RUNS_PER_CLIENT)
        elif client.kind == "request":
            _remember(self._sessionless, run_id, SESSIONLESS_RUNS)

    def forget(self, client: Client) -> None:
        """Drop an ended client's runs: nobody can reach them any more."""
        self._by_session.pop(client.key, None)

    def own(self, client: Client) -> list[str] | None:
        """The run ids `client` may list, newest first (None: every run in the folder)."""
        if client.kind == "local":
            return None
        if client.kind == "session":
            return list(reversed(self._by_session.get(client.key, {})))
        return []

    def resolve(self, client: Client, trajectory_id: str) -> str | None:
        """The full run id `trajectory_id` names for `client` (None: not one of its runs).

        For ``local`` the id is returned as given (the log folder is searched by prefix).
        """
        if client.kind == "local":
            return trajectory_id
        if client.kind == "request":
            return trajectory_id if trajectory_id in self._sessionless else None
        matches = [run for run in self._by_session.get(client.key, {}) if run.startswith(trajectory_id)]
        return matches[0] if len(matches) == 1 else None


def _remember(runs: OrderedDict[str, None], run_id: str, limit: int) -> None:
    runs[run_id] = None
    while len(runs) > limit:
        runs.popitem(last=False)


def private_log_dir(log_dir: Path, *, default: bool) -> None:
    """Make the server's default trajectory folder 0700 where it is open to other users; warn for a named one.

    The default folder (``~/.cache/rlm-adapters/mcp-trajectories``) is the server's own: older versions made it
    0755 with 0644 files, which closing the folder makes unreadable to others too. A folder given by
    ``--log-dir`` keeps its owner's choice (it may be shared on purpose); its new logs are 0600 all the same.
    A folder not there yet is made 0700 by the logger.
    """
    try:
        fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        mode = stat.S_IMODE(info.st_mode)
        if info.st_uid != os.geteuid() or not mode & 0o077:
            return
        if default:
            os.fchmod(fd, 0o700)
            logger.info("the trajectory folder %s was open to other users (mode %o): made 0700", log_dir, mode)
        else:
            logger.warning(
                "the trajectory folder %s can be entered by other users (mode %o); its logs hold your queries and "
                "what the runs read: chmod 700 it unless it is shared on purpose",
                log_dir,
                mode,
            )
    finally:
        os.close(fd)


def add_trajectory_resources(server: MCPServer, log_dir: Path, book: TrajectoryBook) -> None:
    """Register the two trajectory resources on `server`, answering each client with its own runs."""
    trajectories = RLMLogger(log_dir)

    @server.resource(
        "rlm://trajectories",
        name="recent-trajectories",
        description=f"Your {RECENT_LIMIT} most recent runs: id, time, query and finish",
        mime_type="application/json",
    )
    async def recent_trajectories() -> str:
        return json.dumps(recent(log_dir, trajectories, book.own(current_client())), ensure_ascii=False)

    @server.resource(
        "rlm://trajectories/{trajectory_id}",
        name="trajectory",
        description="One of your runs' trajectory: its header and every event (long fields cut)",
        mime_type="application/json",
    )
    async def trajectory(trajectory_id: str, ctx: Context) -> str:
        if not _TRAJECTORY_ID.match(trajectory_id):
            raise ResourceError(f"{trajectory_id!r} is not a trajectory id (8 to 32 lowercase hex digits)")
        run_id = book.resolve(current_client(ctx), trajectory_id)
        path = trajectories.find(run_id) if run_id is not None and log_dir.is_dir() else None
        if path is None:
            raise ResourceError(f"no trajectory {trajectory_id!r}")
        header, events = read_trajectory(path)
        return json.dumps({"header": header, "events": events}, ensure_ascii=False, default=str)


def recent(log_dir: Path, trajectories: RLMLogger, own: list[str] | None) -> list[dict[str, Any]]:
    """Summaries of the newest trajectories among `own` (None: all; file names start with a UTC stamp)."""
    if not log_dir.is_dir():
        return []
    if own is None:
        paths = sorted(log_dir.glob("rlm_*.jsonl"), reverse=True)[:RECENT_LIMIT]
    else:
        found = (trajectories.find(run_id) for run_id in own)  # a run not logged yet has no file
        paths = list(itertools.islice((path for path in found if path is not None), RECENT_LIMIT))
    return [_summary(path) for path in paths]


def _summary(path: Path) -> dict[str, Any]:
    header, events = read_trajectory(path)
    final: dict[str, Any] = next((e for e in reversed(events) if e.get("kind") == "final" and e.get("depth") == 0), {})
    run_id = str(header.get("run_id", ""))
    return {
        "id": run_id,
        "uri": f"rlm://trajectories/{run_id}",
        "time": header.get("time"),
        "query": str(header.get("query") or "")[:200],
        "finish_reason": final.get("finish_reason"),
    }


__all__ = ["RECENT_LIMIT", "TrajectoryBook", "add_trajectory_resources", "recent"]
