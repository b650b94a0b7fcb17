"""The ``session=`` REPLs a server with ``--cache`` had open, kept beside the cache so that a restart keeps them.

A session's REPL dies with the server, but it is a function of the calls that made it (their arguments and
the model's replies, which the call cache keeps). So each session's calls are written to
``FILE.sessions.json`` beside ``--cache FILE`` (``0600``; servers sharing a cache merge their writes) under
the client's principal and the session's name: ``query``, ``paths``, ``text`` and ``output_schema`` as the
call gave them (files are read again, under the roots of the call that restores them, not copied here).
After a restart, the first call naming the session (from the same principal: ``local`` over stdio, the
token's holder over HTTP) runs those calls again in a new REPL before its own, every model call replaying
from the cache, and the session is as it was. A session that closes for good (its MCP session ended, idle,
lifetime, evicted) is forgotten; one the server stopped with, or that a crash took, is kept.

The file is ours or refused: a symbolic link, another user's file or one writable by others, one that is not
JSON of this shape, or one over `MAX_FILE_BYTES`, is named in a `CacheError` at start and left as it is.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.errors import CacheError
from rlm_adapters.mcp_server.private_file import read_private_json, update_private_json

logger = logging.getLogger("rlm_adapters.mcp_server")

FORMAT = "rlm-mcp-sessions"
VERSION = 1
MAX_FILE_BYTES = 64 << 20
TURN_KEYS = frozenset({"query", "paths", "text", "output_schema"})


def store_path(cache: Path) -> Path:
    """Where the sessions of a server with ``--cache cache`` are kept."""
    return cache.with_name(cache.name + ".sessions.json")


@dataclass
class Record:
    """One session's calls: whose, under which name, opened with which options, by which server, when."""

    principal: str
    name: str
    options: dict[str, Any]
    turns: list[dict[str, Any]] = field(default_factory=list)
    server: str = ""
    updated: float = 0.0


class SessionStore:
    """The sessions file of a server: records of the sessions open now, and those a restart found (other
    servers sharing the cache keep theirs in it too).

    Args:
        path: The file (`store_path` of the cache).
        idle_seconds: A record not written for this long is dropped (its session would have closed idle).
        clock: Seconds since the epoch.

    Raises:
        CacheError: the file exists and is not one this server wrote (naming it and why).
    """

    def __init__(
        self, path: Path, idle_seconds: float | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.idle_seconds = idle_seconds
        self._clock = clock
        self.server = secrets.token_hex(8)  # this server's records, among those of others sharing the file
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str], Record] = {}  # (client key, name) -> record
        self._claimed: set[tuple[str, str, str]] = set()  # (server, principal, name) of records taken over
        self._found: dict[tuple[str, str], Record] = {}  # (principal, name) -> record, from a restart
        for found in self._parse(read_private_json(path, MAX_FILE_BYTES)):
            self._found[(found.principal, found.name)] = found  # the latest of a name wins

    def claim(self, principal: str, name: str, options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The calls to run again for a session opened now, when a restart found it with these options
        (the record is taken: it is replayed once)."""
        with self._lock:
            found = self._found.get((principal, name))
            if found is None or found.options != dict(options):
                return []
            del self._found[(principal, name)]
            self._claimed.add((found.server, principal, name))
            self._save()
            return list(found.turns)

    def record(
        self, key: str, principal: str, name: str, options: Mapping[str, Any], turns: list[dict[str, Any]]
    ) -> None:
        """The session (`key`'s, named `name`) now stands on `turns`; written to the file at once."""
        with self._lock:
            self._live[(key, name)] = Record(principal, name, dict(options), list(turns), self.server, self._clock())
            self._save()

    def turns(self, key: str, name: str) -> list[dict[str, Any]]:
        """The calls a live session stands on (empty when none is recorded)."""
        with self._lock:
            live = self._live.get((key, name))
            return list(live.turns) if live is not None else []

    def forget(self, key: str, name: str) -> None:
        """The session closed for good: it is not restored after a restart."""
        with self._lock:
            if self._live.pop((key, name), None) is not None:
                self._save()

    def _save(self) -> None:
        """Under the lock: this server's records replace its earlier ones; others' stay, but those taken over."""

        def merge(data: Any) -> dict[str, Any]:
            others = [
                r
                for r in self._parse(data)
                if r.server != self.server and (r.server, r.principal, r.name) not in self._claimed
            ]
            records = [vars(r) for r in others + list(self._live.values())]
            return {"format": FORMAT, "version": VERSION, "sessions": records}

        try:
            update_private_json(self.path, MAX_FILE_BYTES, merge)
        except (OSError, CacheError):
            # A session that cannot be written survives this process only: never a reason to fail its call.
            logger.warning("could not write the sessions file %s", self.path, exc_info=True)

    def _parse(self, data: Any) -> list[Record]:
        """The records in the file's `data` (None: no file), those idle too long left out."""
        if data is None:
            return []
        try:
            records = _records(data)
        except (ValueError, TypeError, KeyError) as exc:
            raise CacheError(str(self.path), f"is not an rlm-mcp sessions file ({type(exc).__name__})") from None
        if self.idle_seconds is None:
            return records
        oldest = self._clock() - self.idle_seconds
        return [r for r in records if r.updated >= oldest]


def _records(data: Any) -> list[Record]:
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not this format or version")
    records = []
    for item in data["sessions"]:
        record = Record(**item)
        if not (isinstance(record.principal, str) and isinstance(record.name, str)):
            raise TypeError("a record's principal or name")
        if not (isinstance(record.options, dict) and isinstance(record.server, str)):
            raise TypeError("a record's options or server")
        if not isinstance(record.updated, int | float) or not isinstance(record.turns, list):
            raise TypeError("a record's time or turns")
        if not all(isinstance(t, dict) and set(t) <= TURN_KEYS for t in record.turns):
            raise TypeError("a record's turns")
        records.append(record)
    return records


__all__ = ["MAX_FILE_BYTES", "SessionStore", "store_path"]
