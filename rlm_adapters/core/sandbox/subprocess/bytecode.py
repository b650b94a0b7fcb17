"""Bytecode for the sandbox's own programs, so that a cold worker start does not compile them.

A program run from its source compiles it on every start (about 10 ms of CPU for the worker, a sixth of a
cold start under bubblewrap), while the import system reuses a valid ``__pycache__`` entry beside the source:
`programs.WORKER_LOADER` imports the worker package's modules that way, and the worker loads its walls
module so. The bytecode is the installation's when it has one (pip compiles wheels); otherwise (an
editable install, ``PYTHONDONTWRITEBYTECODE``) `launch_bytecode` compiles each file once per host process
into a private folder of ours, bound read-only beside its source under bubblewrap and removed at exit, never
into the user's tree. A stale or foreign file is never trusted: the loader checks the source's size and time.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import py_compile
import shutil
import zlib
from pathlib import Path

from rlm_adapters.core.sandbox.tempdirs import new_folder


def cached_bytecode(source: Path) -> Path | None:
    """The installation's cached bytecode of `source` for this interpreter, if it has a valid one.

    Never written here. A stale file (the source changed since) is no use: the loader would compile anyway.
    """
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        return cached if cached.is_file() and _matches(cached, source, source.stat()) else None
    except OSError:
        return None


def launch_bytecode(source: Path) -> Path | None:
    """Bytecode of `source` to bind beside it in a sandbox: the installation's if valid, else one compiled here.

    None when neither exists nor can be made (the worker then compiles its source, as before).
    """
    try:
        stat = source.stat()
        return _launch_bytecode(source, stat.st_mtime_ns, stat.st_size)
    except (OSError, py_compile.PyCompileError):
        return None


@functools.cache
def _launch_bytecode(source: Path, mtime_ns: int, size: int) -> Path | None:
    """`launch_bytecode` once per version of `source` (its time and size are the key): every launch asks."""
    return cached_bytecode(source) or _compiled(source, mtime_ns, size)


def forget_bytecode() -> None:
    """Look for the installation's bytecode again and compile into a new private folder on next use.

    The files compiled so far stay until exit: a running worker restarts from the same launch.
    """
    _launch_bytecode.cache_clear()
    _private_folder.cache_clear()


def _matches(cached: Path, source: Path, stat: os.stat_result) -> bool:
    """Whether the loader would take `cached` for `source` (a stale one would make the worker compile)."""
    with cached.open("rb") as handle:
        header = handle.read(16)
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], "little")
    if flags & 0b1:  # hash-based: the hash of the source's bytes
        return header[8:16] == importlib.util.source_hash(source.read_bytes())
    mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


@functools.cache
def _private_folder() -> Path:
    # Named after this process: a later one sweeps it if this one is killed (tempdirs.sweep).
    folder = new_folder("bytecode")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _compiled(source: Path, mtime_ns: int, size: int) -> Path:
    """Compile `source` into the private folder, in a subfolder per version of it (and per path: the
    worker's modules are many files)."""
    version = f"{mtime_ns}-{size}-{zlib.crc32(os.fsencode(source)):08x}"
    target = _private_folder() / version / Path(importlib.util.cache_from_source(str(source))).name
    target.parent.mkdir(exist_ok=True)
    py_compile.compile(str(source), cfile=str(target), doraise=True)
    return target
