"""Persistent sessions for MCP clients: ``rlm_query(..., session="name")`` keeps one REPL per client and name.

Later calls of the same session see the variables of earlier ones, each call's inputs as ``context_1``, ...,
and the earlier conversations as ``history_0``, ... . A session belongs to the client that opened it (over
HTTP its Mcp-Session-Id; a stdio server has one client), keeps the options of its first call, and is closed
after `IDLE_SECONDS` without a call or when the pool is full (the least recently used one goes).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlm_adapters.core.rlm import RLM
from rlm_adapters.errors import QueryError

MAX_SESSIONS = 16
IDLE_SECONDS = 1800.0
_NAME = re.compile(r"^[\w.-]{1,64}$")


@dataclass
class _Entry:
    rlm: RLM
    options: dict[str, Any]
    used: float


class SessionPool:
    """The open sessions of one server."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, idle_seconds: float = IDLE_SECONDS) -> None:
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = asyncio.Lock()

    async def get(self, client: str, name: str, options: dict[str, Any], build: Callable[[], RLM]) -> RLM:
        """The session's persistent `RLM`, built by `build` on its first call.

        Raises:
            QueryError: a bad name, or options that differ from the session's first call.
        """
        if not _NAME.match(name):
            raise QueryError(f"session={name!r}: use 1-64 letters, digits, '.', '_' or '-'")
        async with self._lock:
            await self._drop_idle()
            key = (client, name)
            entry = self._entries.get(key)
            if entry is not None and entry.options != options:
                raise QueryError(
                    f"session {name!r} was opened with {entry.options}; this call asks for {options}: "
                    "use the same options or another session name"
                )
            if entry is None:
                rlm = await asyncio.to_thread(build)
                entry = self._entries[key] = _Entry(rlm, dict(options), time.monotonic())
                while len(self._entries) > self.max_sessions:
                    _, oldest = self._entries.popitem(last=False)
                    await oldest.rlm.aclose()
            self._entries.move_to_end(key)
            entry.used = time.monotonic()
            return entry.rlm

    async def _drop_idle(self) -> None:
        now = time.monotonic()
        for key, entry in list(self._entries.items()):
            if now - entry.used > self.idle_seconds:
                del self._entries[key]
                await entry.rlm.aclose()

    def names(self, client: str) -> list[str]:
        """The open sessions of one client."""
        return [name for owner, name in self._entries if owner == client]

    async def aclose(self) -> None:
        """Close every session."""
        async with self._lock:
            entries, self._entries = list(self._entries.values()), OrderedDict()
        for entry in entries:
            await entry.rlm.aclose()
