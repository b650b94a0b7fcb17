"""The ``session=`` REPLs a server with ``--cache`` had open, kept beside the cache so that a restart keeps them.

A session's REPL dies with the server, but it is a function of the calls that made it (their arguments and
the model's replies, which the call cache keeps). So each session's calls are written to
``FILE.sessions.json`` beside ``--cache FILE`` (created ``0600``, replaced atomically) under the client's
principal and the session's name: ``query``, ``paths`` and ``text`` as the call gave them (files are read
again, under the roots of the call that restores them, not copied here). After a restart, the first call
naming the session (from the same principal: ``local`` over stdio, the token's holder over HTTP) runs those
calls again in a new REPL before its own, every model call replaying from the cache, and the session is as it
was. A session that closes for good (its MCP session ended, idle, lifetime, evicted) is forgotten; one the
server stopped with, or that a crash took, is kept.

The file is ours or refused: a symbolic link, another user's file or one writable by others, one that is not
JSON of this shape, or one over `MAX_FILE_BYTES`, is named in a `CacheError` at start and left as it is.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.errors import CacheError
from rlm_adapters.mcp_server.private_file import read_private_json, write_private_json

logger = logging.getLogger("rlm_adapters.mcp_server")

FORMAT = "rlm-mcp-sessions"
VERSION = 1
MAX_FILE_BYTES = 64 << 20
TURN_KEYS = frozenset({"query", "paths", "text"})


def store_path(cache: Path) -> Path:
    """Where the sessions of a server with ``--cache cache`` are kept."""
    return cache.with_name(cache.name + ".sessions.json")


@dataclass
class Record:
    """One session's calls: whose, under which name, opened with which options."""

    principal: str
    name: str
    options: dict[str, Any]
    turns: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"principal": self.principal, "name": self.name, "options": self.options, "turns": self.turns}


class SessionStore:
    """The sessions file of one server: records of the sessions open now, and those a restart found.

    Args:
        path: The file (`store_path` of the cache).

    Raises:
        CacheError: the file exists and is not one this server wrote (naming it and why).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str], Record] = {}  # (client key, name) -> record
        self._found: dict[tuple[str, str], Record] = _load(path)  # (principal, name) -> record, from a restart

    def claim(self, principal: str, name: str, options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The calls to run again for a session opened now, when a restart found it with these options
        (the record is taken: it is replayed once)."""
        with self._lock:
            found = self._found.get((principal, name))
            if found is None or found.options != dict(options):
                return []
            del self._found[(principal, name)]
            self._save()
            return list(found.turns)

    def record(
        self, key: str, principal: str, name: str, options: Mapping[str, Any], turns: list[dict[str, Any]]
    ) -> None:
        """The session (`key`'s, named `name`) now stands on `turns`; written to the file at once."""
        with self._lock:
            self._live[(key, name)] = Record(principal, name, dict(options), list(turns))
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
        """Under the lock: write every record (live ones last, so they win over found ones of the same name)."""
        records = [r.to_dict() for r in self._found.values()] + [r.to_dict() for r in self._live.values()]
        try:
            write_private_json(self.path, {"format": FORMAT, "version": VERSION, "sessions": records})
        except OSError:
            # A session that cannot be written survives this process only: never a reason to fail its call.
            logger.warning("could not write the sessions file %s", self.path, exc_info=True)


def _load(path: Path) -> dict[tuple[str, str], Record]:
    """The records in `path` (none when it does not exist), checked before anything is parsed."""
    data = read_private_json(path, MAX_FILE_BYTES)
    if data is None:
        return {}
    try:
        return _records(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise CacheError(str(path), f"is not an rlm-mcp sessions file ({type(exc).__name__})") from None


def _records(data: Any) -> dict[tuple[str, str], Record]:
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError("not this format or version")
    found: dict[tuple[str, str], Record] = {}
    for item in data["sessions"]:
        principal, name, options, turns = item["principal"], item["name"], item["options"], item["turns"]
        if not (isinstance(principal, str) and isinstance(name, str) and isinstance(options, dict)):
            raise TypeError("a record's principal, name or options")
        if not isinstance(turns, list) or not all(isinstance(t, dict) and set(t) <= TURN_KEYS for t in turns):
            raise TypeError("a record's turns")
        found[(principal, name)] = Record(principal, name, options, turns)  # the last one of a name wins
    return found


__all__ = ["MAX_FILE_BYTES", "SessionStore", "store_path"]
