"""The background runs of a server with ``--cache``, kept beside the cache so that they outlive the server.

Each run is one small file in the folder ``FILE.runs/`` beside ``--cache FILE`` (``0700``; its records
``0600``): ``<run id>.w.json`` when it starts, with its principal and the call's arguments, replaced by
``<run id>.e.json`` when it ends, with its result. A later server (a restart; over stdio, the next client's
server) asked for the id by the same principal returns a finished result as it was, and runs an unfinished one
again: every model call that had come back replays from the cache, and the run goes on from the first that had
not. A cancelled run is not run again. Only durable principals' runs are written (`identity.Client.durable`).

What is kept is bounded: a record is at most `MAX_RECORD_BYTES` (a larger result is written down as a failure
that says so, and to call again, every model call replaying from the cache), the folder at most
`MAX_TOTAL_BYTES` (the oldest ended runs go first), and ended runs as few and as long as the server's
`RunLimits` say. A store found over these bounds at start is cut down to them, with a warning naming what was
dropped; it is never a reason not to start. Writes go to one thread of the store, never the event loop, in the
order they were made; `close` waits for them.

Every file is checked before it is read, as the call cache is: the folder must be this user's own and
writable by nobody else, and a record a regular file of this user's (opened with ``O_NOFOLLOW``) that others
cannot write. A folder that fails is refused at start (`CacheError`, naming it); a record that fails is never
read (refused at start, unknown later). Several servers may share the folder: each writes only its own runs'
records, each atomically. The single-file store of earlier versions (``FILE.runs.json``) is read once,
checked the same way, cut down to the bounds, written as records and removed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from rlm_adapters.errors import CacheError
from rlm_adapters.mcp_server.private_file import read_private_json

logger = logging.getLogger("rlm_adapters.mcp_server")

FORMAT = "rlm-mcp-run"
VERSION = 2
LEGACY_FORMAT = "rlm-mcp-runs"
MAX_RECORD_BYTES = 4 << 20
MAX_TOTAL_BYTES = 64 << 20
# The single file of version 1, read only to be converted: at most what the folder keeps.
LEGACY_MAX_BYTES = 256 << 20
State = Literal["working", "done", "failed", "cancelled"]
STATES = ("working", "done", "failed", "cancelled")
ARGUMENTS = frozenset(
    {"query", "paths", "text", "model", "sub_model", "max_depth", "max_cost", "run_timeout", "timeout", "session"}
    | {"output_schema"}
)
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")
_RECORD = re.compile(r"^([A-Za-z0-9_-]{22})\.([we])\.json$")


def runs_path(cache: Path) -> Path:
    """Where the background runs of a server with ``--cache cache`` are kept (a folder)."""
    return cache.with_name(cache.name + ".runs")


def legacy_runs_path(cache_runs: Path) -> Path:
    """The single-file store earlier versions kept beside the folder `cache_runs` (``FILE.runs.json``)."""
    return cache_runs.with_name(cache_runs.name + ".json")


@dataclass
class StoredRun:
    """One run as its record has it.

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


@dataclass
class SharedRun(StoredRun):
    """One run as a shared store (``--store``) has it: a `StoredRun`, and where it works.

    Attributes:
        replica: The replica running it (`replica.Replica.id`), or that ran it.
        lost: It is ``working`` but its replica's lease lapsed: that replica is gone.
        task_created_at: When it became an MCP task (seconds since the epoch), None if it is not one.
        task_ttl_ms: The task's ttl (milliseconds).
    """

    replica: str = ""
    lost: bool = False
    task_created_at: float | None = None
    task_ttl_ms: int | None = None


def too_large(stored: StoredRun, size: int, max_bytes: int, when: float) -> StoredRun:
    """What is kept of a record of `size` bytes, over `max_bytes`: a failure that says what to do."""
    what = "arguments" if stored.state == "working" else "result"
    kept = "were" if what == "arguments" else "was"
    error = (
        f"the run's {what} ({size / (1 << 20):.1f} MiB) {kept} more than the {max_bytes >> 20} MiB "
        "a restart keeps: call rlm_query again with the same arguments (its model calls replay from the cache)"
    )
    return StoredRun(stored.principal, {}, "failed", None, error, stored.finished or when)


@dataclass
class _Entry:
    run_id: str
    ended: bool
    size: int
    when: float  # the record's mtime: its start, or its end


class RunStore:
    """The runs folder of one server (other servers sharing the cache may keep theirs in it too).

    Args:
        path: The folder (`runs_path` of the cache); created ``0700`` if missing.
        keep_results: Ended runs kept (the oldest are forgotten first).
        keep_seconds: Seconds an ended run is kept.
        clock: Seconds since the epoch (a restart must read the same clock).
        max_record_bytes: The largest record kept.
        max_total_bytes: The most all records together take.

    Raises:
        CacheError: the folder, or a record or the legacy file in it, could have been written by someone else
            (naming it and why).
    """

    def __init__(
        self,
        path: Path,
        keep_results: int,
        keep_seconds: float,
        *,
        clock: Callable[[], float] = time.time,
        max_record_bytes: int = MAX_RECORD_BYTES,
        max_total_bytes: int = MAX_TOTAL_BYTES,
    ) -> None:
        self.path = path
        self.keep_results = keep_results
        self.keep_seconds = keep_seconds
        self.max_record_bytes = max_record_bytes
        self.max_total_bytes = max_total_bytes
        self._clock = clock
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlm-mcp-runs")
        # At start, on the caller's thread: refused now rather than at the first run; cut down, saying so.
        with self._folder(create=True) as folder:
            for entry in os.scandir(folder):
                if _RECORD.match(entry.name):
                    self._checked(folder, entry.name)
            self._convert_legacy(folder)
            dropped = self._trim(folder)
        if dropped:
            logger.warning(
                "the runs store %s held more than it keeps (%d MiB in all, %d MiB a run, %d ended runs, %g s): "
                "dropped %d runs; a dropped run's call, made again, replays from the cache",
                path,
                max_total_bytes >> 20,
                max_record_bytes >> 20,
                keep_results,
                keep_seconds,
                dropped,
            )

    # -- the server's side ---------------------------------------------------------------------------
    def find(self, principal: str, run_id: str) -> StoredRun | None:
        """`principal`'s run `run_id`, if the folder has it (and it has not expired); read afresh, so that a
        run another server sharing the cache wrote is found too. Reads one record of at most
        `max_record_bytes`."""
        if not _RUN_ID.match(run_id):
            return None
        try:
            with self._folder() as folder:
                for kind in ("e", "w"):
                    name = f"{run_id}.{kind}.json"
                    try:
                        data = self._read(folder, name)
                    except FileNotFoundError:
                        continue
                    stored = _parse(data)
                    if stored is None or stored.principal != principal:
                        return None
                    if stored.state != "working" and self._clock() - (stored.finished or 0.0) > self.keep_seconds:
                        return None
                    return stored
        except (OSError, CacheError) as exc:
            logger.warning("run %s… could not be read from %s (%s)", run_id[:6], self.path, exc)
        return None

    def started(self, run_id: str, principal: str, arguments: Mapping[str, Any]) -> None:
        """A run started (or started again): written down (by the store's thread) before it does any work."""
        stored = StoredRun(principal, {k: arguments.get(k) for k in ARGUMENTS})
        self._submit(self._write, run_id, stored, None)

    def ended(
        self,
        run_id: str,
        principal: str,
        state: State,
        result: BaseModel | dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """A run ended: its result (or error, or cancellation) replaces its arguments' record. `result` (the
        tool's result) is turned into JSON on the store's thread, not the caller's."""
        stored = StoredRun(principal, {}, state, None, error, self._clock())
        self._submit(self._write, run_id, stored, result)

    def flush(self) -> None:
        """Wait until every write made so far is on disk (or has failed, with a warning)."""
        with contextlib.suppress(RuntimeError):  # closed: nothing is left to wait for
            self._writer.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the writes made so far and end the store's thread (blocking: call it in a thread)."""
        self._writer.shutdown(wait=True)

    # -- the store's thread ---------------------------------------------------------------------------
    def _submit(self, job: Callable[..., None], *args: Any) -> None:
        def run() -> None:
            try:
                job(*args)
            except Exception:  # the run goes on; only a later server would miss it
                logger.warning("could not write the runs store %s", self.path, exc_info=True)

        try:
            self._writer.submit(run)
        except RuntimeError:  # closed: the server is stopping
            logger.warning("the runs store %s is closed; run %s… is not written down", self.path, args[0][:6])

    def _write(self, run_id: str, stored: StoredRun, result: BaseModel | dict[str, Any] | None) -> None:
        if isinstance(result, BaseModel):
            result = result.model_dump(mode="json", by_alias=True)
        stored.result = result
        body = _dump(run_id, stored)
        if len(body) > self.max_record_bytes:
            body = _dump(run_id, too_large(stored, len(body), self.max_record_bytes, self._clock()))
        kind = "w" if stored.state == "working" else "e"
        with self._folder() as folder:
            temporary = f".{run_id}.{os.getpid()}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600, dir_fd=folder)
            with os.fdopen(fd, "wb") as out:
                out.write(body)
                out.flush()
                os.fsync(out.fileno())
                # The record's mtime says when: expiry reads the folder with stat alone.
                when = stored.finished if stored.finished is not None else self._clock()
                os.utime(out.fileno(), (when, when))
            os.replace(temporary, f"{run_id}.{kind}.json", src_dir_fd=folder, dst_dir_fd=folder)
            if kind == "e":
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{run_id}.w.json", dir_fd=folder)
            self._trim(folder)

    # -- the folder ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _folder(self, *, create: bool = False) -> Iterator[int]:
        """The folder, open (``O_NOFOLLOW``) and checked: this user's own, writable by nobody else."""
        if create:
            # The cache's own folder may not be there yet: made as the call cache makes it (0700).
            os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.path, 0o700)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise CacheError(str(self.path), f"is not a folder this server can use ({exc.strerror})") from None
        try:
            info = os.fstat(fd)
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise CacheError(str(self.path), "could have been written by another user (its owner or mode)")
            yield fd
        finally:
            os.close(fd)

    def _checked(self, folder: int, name: str) -> os.stat_result:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        where = str(self.path / name)
        if not stat.S_ISREG(info.st_mode):
            raise CacheError(where, "is not a regular file (a link, or something else)")
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise CacheError(where, "could have been written by another user (its owner or mode)")
        return info

    def _read(self, folder: int, name: str) -> Any:
        # O_NONBLOCK: a FIFO in the folder must not hang the server on open (it is refused below).
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            where = str(self.path / name)
            if not stat.S_ISREG(info.st_mode):
                raise CacheError(where, "is not a regular file")
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                raise CacheError(where, "could have been written by another user (its owner or mode)")
            if info.st_size > self.max_record_bytes:
                raise CacheError(where, f"is larger than {self.max_record_bytes >> 20} MiB")
            try:
                return json.loads(handle.read(self.max_record_bytes + 1))
            except ValueError:
                raise CacheError(where, "is not a record rlm-mcp wrote") from None

    def _entries(self, folder: int) -> list[_Entry]:
        entries: dict[str, _Entry] = {}
        for item in os.scandir(folder):
            found = _RECORD.match(item.name)
            if found is None:
                continue
            try:
                info = self._checked(folder, item.name)
            except (OSError, CacheError):
                continue  # gone meanwhile, or refused: never read, never counted
            entry = _Entry(found.group(1), found.group(2) == "e", info.st_size, info.st_mtime)
            known = entries.get(entry.run_id)
            if known is None or entry.ended:
                entries[entry.run_id] = entry
                if known is not None:  # a start whose end is written: the start is left over
                    self._unlink(folder, entry.run_id, False)
            elif known.ended:
                self._unlink(folder, entry.run_id, False)
        return list(entries.values())

    def _trim(self, folder: int) -> int:
        """Drop what the folder keeps no more: oversized records, expired or surplus ended runs, then the
        oldest runs until the total fits. The count dropped."""
        entries = self._entries(folder)
        now = self._clock()
        drop = [e for e in entries if e.size > self.max_record_bytes]
        kept = [e for e in entries if e.size <= self.max_record_bytes]
        ended = sorted((e for e in kept if e.ended), key=lambda e: e.when)
        extra = len(ended) - self.keep_results
        for index, entry in enumerate(ended):
            if index < extra or now - entry.when > self.keep_seconds:
                drop.append(entry)
        kept = [e for e in kept if e not in drop]
        total = sum(e.size for e in kept)
        # Ended runs go first (their calls replay from the cache), then the oldest unfinished ones.
        for entry in sorted(kept, key=lambda e: (not e.ended, e.when)):
            if total <= self.max_total_bytes:
                break
            drop.append(entry)
            total -= entry.size
        for entry in drop:
            self._unlink(folder, entry.run_id, entry.ended)
        return len(drop)

    @staticmethod
    def _unlink(folder: int, run_id: str, ended: bool) -> None:
        with contextlib.suppress(FileNotFoundError):  # another server sharing the folder was first
            os.unlink(f"{run_id}.{'e' if ended else 'w'}.json", dir_fd=folder)

    def _convert_legacy(self, folder: int) -> None:
        """Version 1's single file: checked as before, its runs written as records (cut to the bounds),
        then removed. One too large to read is removed unread, saying so."""
        legacy = legacy_runs_path(self.path)
        try:
            size = os.lstat(legacy).st_size
        except FileNotFoundError:
            return
        try:
            # Its owner, mode and kind are checked first (a refusal stands); only its size is forgiven.
            data = read_private_json(legacy, LEGACY_MAX_BYTES)
        except CacheError as exc:
            if "larger than" not in exc.reason:
                raise
            data = None
        runs = data.get("runs") if isinstance(data, dict) and data.get("format") == LEGACY_FORMAT else None
        if data is not None and not isinstance(runs, dict):  # someone's file by that name: left as it is
            raise CacheError(str(legacy), "is not an rlm-mcp runs file")
        converted = 0
        for run_id, item in (runs or {}).items():
            stored = _parse({**item, "format": FORMAT, "version": VERSION}) if isinstance(item, dict) else None
            if stored is not None and _RUN_ID.match(str(run_id)):
                self._write(str(run_id), stored, stored.result)
                converted += 1
        os.unlink(legacy)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(legacy.with_name(legacy.name + ".lock"))
        logger.warning(
            "the runs file %s (%d MiB, the single file of earlier versions) is now the folder %s: %d runs kept",
            legacy,
            size >> 20,
            self.path,
            converted,
        )


def _dump(run_id: str, stored: StoredRun) -> bytes:
    record = {"format": FORMAT, "version": VERSION, "id": run_id, **vars(stored)}
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


def _parse(data: Any) -> StoredRun | None:
    """The run a record holds, or None for anything that is not one this server wrote."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        return None
    try:
        fields = {k: v for k, v in data.items() if k not in ("format", "version", "id")}
        stored = StoredRun(**fields)
    except TypeError:
        return None
    if not isinstance(stored.principal, str) or stored.state not in STATES:
        return None
    if not isinstance(stored.arguments, dict) or not set(stored.arguments) <= ARGUMENTS:
        return None
    if stored.result is not None and not isinstance(stored.result, dict):
        return None
    if stored.error is not None and not isinstance(stored.error, str):
        return None
    if stored.finished is not None and (
        isinstance(stored.finished, bool) or not isinstance(stored.finished, int | float)
    ):
        return None
    return stored


__all__ = [
    "ARGUMENTS",
    "MAX_RECORD_BYTES",
    "MAX_TOTAL_BYTES",
    "RunStore",
    "SharedRun",
    "StoredRun",
    "runs_path",
    "too_large",
]
