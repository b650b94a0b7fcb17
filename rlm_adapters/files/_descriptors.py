"""What an entry met while loading is, in words, and reading an opened file up to a bound.

Shared by the walker (`rlm_adapters.files._walk`), the globs and the loader: a skipped entry's reason reads the
same wherever it was met.
"""

from __future__ import annotations

import errno
import os
import stat


def kind_of(mode: int) -> str:
    """Why a non-regular file is skipped, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe), not a regular file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a regular file"
    if stat.S_ISLNK(mode):
        return "a symlink loop"
    return "not a regular file"


def open_error(exc: OSError) -> str:
    """Why opening a checked entry failed, in words."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "it was replaced by a symlink during the call (or is a symlink loop); not followed"
    if exc.errno == errno.ENOENT:
        return "it disappeared during the call"
    return f"cannot open: {exc.strerror}"


def read_at_most(fd: int, limit: int) -> bytes:
    """Read from `fd` until end of file or `limit` bytes, whichever comes first."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1024**2))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
