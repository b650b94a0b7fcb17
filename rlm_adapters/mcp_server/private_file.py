"""A JSON file only this user writes, beside the call cache: checked before it is read, replaced atomically.

What `--cache` keeps besides model replies (the ``session=`` REPLs' calls, the background runs) is read back by
a later server and acted on (calls run again), so a file someone else could have written is refused: a symbolic
link or anything but a regular file, another user's file, one writable by group or others, one larger than
the caller's bound, or one that is not JSON. Each refusal is a `CacheError` naming the file, which is left
as it is. Several servers may share one cache, so writes go through `update_private_json`: under a lock,
each reads the file, changes its own part and writes it back, and nobody's records are lost.
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_adapters.errors import CacheError


def read_private_json(path: Path, max_bytes: int) -> Any | None:
    """The JSON in `path` (None when there is no such file), once the file is known to be this user's own.

    Raises:
        CacheError: the file could have been written by someone else, is too large, or is not JSON.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CacheError(str(path), f"cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise CacheError(str(path), "is not a regular file (a link, or something else)")
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(str(path), "could have been written by another user (its owner or mode)")
    if info.st_size > max_bytes:
        raise CacheError(str(path), f"is larger than {max_bytes >> 20} MiB, more than this file ever holds")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise CacheError(str(path), f"is not a file rlm-mcp wrote ({type(exc).__name__})") from None


def update_private_json(path: Path, max_bytes: int, update: Callable[[Any | None], Any]) -> Any:
    """Replace `path` with ``update(its JSON, or None)``, holding a lock that every server sharing the file
    takes too (``path.lock``), so that no server's write undoes another's; the JSON written is returned.

    Raises:
        CacheError: the file (or its lock) could have been written by someone else, or is not JSON.
        OSError: the file could not be written (the old one, if any, is left whole).
    """
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise CacheError(str(lock), "could have been written by another user (its owner or mode)")
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = update(read_private_json(path, max_bytes))
        write_private_json(path, data)
        return data
    finally:
        os.close(fd)  # closing it releases the lock


def write_private_json(path: Path, data: Any) -> None:
    """Replace `path` with `data` as JSON, atomically, in a file created ``0600`` (never through a link).

    Raises:
        OSError: the file could not be written (the old one, if any, is left whole).
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out, ensure_ascii=False)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


__all__ = ["read_private_json", "update_private_json", "write_private_json"]
