"""Bytecode for the sandbox's own programs, so that a cold worker start does not compile them.

``python worker.py`` compiles the script on every start (about 10 ms of CPU, a sixth of a cold start under
bubblewrap), while a loader reuses a valid ``__pycache__`` entry. `WORKER_BOOTSTRAP` starts the worker through
such a loader. The bytecode is the installation's when it has one (pip compiles wheels); otherwise (an
editable install, ``PYTHONDONTWRITEBYTECODE``) `launch_bytecode` compiles the file once per host process into
a private folder of ours, bound read-only beside the worker under bubblewrap and removed at exit, never into
the user's tree. A stale or foreign file is never trusted: the loader checks the source's size and time.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import os
import py_compile
import shutil
import tempfile
from pathlib import Path

# Run with ``python -I -S -c WORKER_BOOTSTRAP worker.py ARGS``: the worker then sees the argv that
# ``python worker.py ARGS`` gives it, and nothing is written (the runtime is read-only inside anyway).
WORKER_BOOTSTRAP = (
    "import sys, __main__\n"
    "from importlib.machinery import SourceFileLoader\n"
    "sys.dont_write_bytecode = True\n"
    "sys.argv = sys.argv[1:]\n"
    "__main__.__file__ = sys.argv[0]\n"
    "exec(SourceFileLoader('__main__', sys.argv[0]).get_code('__main__'), __main__.__dict__)\n"
)


def cached_bytecode(source: Path) -> Path | None:
    """The installation's cached bytecode of `source` for this interpreter, if it has one (never written here)."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    return cached if cached.is_file() else None


def launch_bytecode(source: Path) -> Path | None:
    """Bytecode of `source` to bind beside it in a sandbox: the installation's, else one compiled here.

    None when neither exists nor can be made (the worker then compiles its source, as before).
    """
    cached = cached_bytecode(source)
    if cached is not None:
        return cached
    try:
        stat = source.stat()
        return _compiled(source, stat.st_mtime_ns, stat.st_size)
    except (OSError, py_compile.PyCompileError):
        return None


@functools.cache
def _private_folder() -> Path:
    # The "rlm-worker-<pid>-" prefix lets a later process sweep it if this one is killed (process.sweep_stale).
    folder = Path(tempfile.mkdtemp(prefix=f"rlm-worker-{os.getpid()}-bytecode-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@functools.cache
def _compiled(source: Path, mtime_ns: int, size: int) -> Path:
    """Compile `source` once per version of it (its time and size are the cache key)."""
    target = _private_folder() / f"{mtime_ns}-{size}" / Path(importlib.util.cache_from_source(str(source))).name
    target.parent.mkdir(exist_ok=True)
    py_compile.compile(str(source), cfile=str(target), doraise=True)
    return target
