"""The user's private folder in the temp dir, which holds every folder a run or a sandbox makes there, and its sweep.

Workers' folders, the shared context files, a run's and a session's scratch, converter jobs and compiled bytecode
all go into one folder per user: ``$TMPDIR/rlm-<uid>``, mode 0700. It is checked each time a folder is made in
it: a real folder (never a link), this user's, open to nobody else (a loose mode of this user's own folder is
tightened). Each folder in it is named ``rlm-<kind>-<pid>-...`` after the process that made it, so that a later
process can remove what a killed one left (`sweep`, run once per process in the background).

The shared temp dir is never swept (issue 48): another user could plant names there (a ``context`` linked to
the victim's files was made 0755 by the old sweep). In the private folder nobody else can plant anything, and
still each name is opened without following links and removed only when this user owns it.

If another user holds ``rlm-<uid>`` first, this process makes a private folder of its own with `mkdtemp`
(``rlm-<uid>-<pid>-XXXXXXXX``, which no one can take in advance), says so once, and a later sweep removes it
with its content once this process is gone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from rlm_adapters.core.sandbox.reaper import REAPER

logger = logging.getLogger("rlm_adapters.sandbox")

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
OWNED = re.compile(r"rlm-[a-z]+-(\d+)-")  # a folder in the private folder, named after its process
# Subfolders a worker folder makes read-only (its context folder), given write rights back before removal.
READ_ONLY_CHILDREN = ("context",)


class _State:
    """What this process found out about its private folder (see `forget`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fallbacks: dict[str, Path] = {}  # temp dir -> this process's own private folder there
        self.swept: set[str] = set()  # temp dirs whose leftovers this process has handed to the sweep
        self.hooked = False  # a forked child forgets its parent's fallback folders (named after the parent)


_STATE = _State()


def forget() -> None:
    """Forget the fallback folders and which temp dirs were swept (for tests; the folders stay on disk)."""
    with _STATE.lock:
        _STATE.fallbacks.clear()
        _STATE.swept.clear()


def _forget_in_child() -> None:
    _STATE.lock = threading.Lock()  # a copy another thread of the parent may have held at the fork
    forget()


def _temporary(temporary: str | Path | None) -> str:
    return str(temporary) if temporary is not None else tempfile.gettempdir()


def private_folder(temporary: str | Path | None = None) -> Path:
    """This user's private folder in `temporary` (default: the temp dir), made or checked now.

    Raises:
        OSError: Neither the shared name nor a folder of this process's own can be made there.
    """
    base = _temporary(temporary)
    uid = os.geteuid()
    shared = os.path.join(base, f"rlm-{uid}")
    with _STATE.lock:
        fallback = _STATE.fallbacks.get(base)
    if fallback is not None and _usable(str(fallback)) is None:
        return fallback
    with contextlib.suppress(FileExistsError):
        os.mkdir(shared, 0o700)
    problem = _usable(shared)
    if problem is None:
        return Path(shared)
    with _STATE.lock:
        fallback = _STATE.fallbacks.get(base)
        if fallback is None or _usable(str(fallback)) is not None:
            fallback = Path(tempfile.mkdtemp(prefix=f"rlm-{uid}-{os.getpid()}-", dir=base))
            _STATE.fallbacks[base] = fallback
            if not _STATE.hooked and hasattr(os, "register_at_fork"):
                _STATE.hooked = True
                os.register_at_fork(after_in_child=_forget_in_child)
            logger.warning(
                "%s %s, so this process keeps its sandbox and run folders in %s instead; remove %s (or set TMPDIR "
                "to a folder of your own) to share one folder between processes again",
                shared,
                problem,
                fallback,
                shared,
            )
    return fallback


def _usable(path: str) -> str | None:
    """Why `path` cannot be this user's private folder, or None once it is one (a loose mode is tightened)."""
    try:
        fd = os.open(path, _FOLDER_FLAGS)
    except OSError as exc:
        return "is a link or not a folder" if os.path.islink(path) else f"cannot be opened ({exc.strerror})"
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            return f"belongs to another user (uid {info.st_uid})"
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.fchmod(fd, 0o700)  # ours: what others may have planted meanwhile is never removed (not ours)
    finally:
        os.close(fd)
    return None


def new_folder(kind: str, temporary: str | Path | None = None) -> Path:
    """A fresh 0700 folder ``rlm-<kind>-<pid>-XXXXXXXX`` in this user's private folder.

    The first one of a process also hands the sweep of that temp dir's leftovers to the reaper's thread.

    Args:
        kind: What the folder is for, lowercase letters only (``worker``, ``run``, ``session``, ...).
        temporary: The temp dir (default: ``tempfile.gettempdir()``).

    Raises:
        OSError: The folder cannot be made.
    """
    if not kind.isalpha() or not kind.islower():
        raise ValueError(f"a folder kind is lowercase letters only, got {kind!r}")
    base = _temporary(temporary)
    folder = Path(tempfile.mkdtemp(prefix=f"rlm-{kind}-{os.getpid()}-", dir=private_folder(base)))
    with _STATE.lock:
        first = base not in _STATE.swept
        _STATE.swept.add(base)
    if first:
        REAPER.submit(functools.partial(_sweep_quietly, base))
    return folder


def gone(pid: int) -> bool:
    """Whether no process `pid` exists (in this PID namespace)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, under another user
        return False
    return False


def _sweep_quietly(temporary: str) -> None:
    removed = sweep(temporary)
    if removed:
        logger.debug("removed %d folders that killed processes left in %s", removed, temporary)


def sweep(temporary: str | Path | None = None) -> int:
    """Remove what killed processes of this user left in `temporary`; returns how many folders went.

    In the private folder: every ``rlm-<kind>-<pid>-`` folder whose process is gone. Beside it: this process's
    kind of fallback folder (``rlm-<uid>-<pid>-``) of a process that is gone, with all it holds. Only this user's
    folders are removed, and no link is followed.
    """
    base = _temporary(temporary)
    uid = os.geteuid()
    removed = 0
    fallback = re.compile(rf"rlm-{uid}-(\d+)-")
    # The temp dir itself is configuration (TMPDIR may name a link); every name in it is opened without following.
    with contextlib.suppress(OSError), _opened(base, follow=True) as base_fd:
        for name in os.listdir(base_fd):
            match = fallback.match(name)
            if match is not None and gone(int(match.group(1))):
                removed += remove_at(base_fd, name)
        shared = f"rlm-{uid}"
        with contextlib.suppress(OSError), _opened(shared, base_fd) as private_fd:
            if os.fstat(private_fd).st_uid != uid:
                return removed
            for name in os.listdir(private_fd):
                match = OWNED.match(name)
                if match is not None and gone(int(match.group(1))):
                    removed += remove_at(private_fd, name)
    return removed


@contextlib.contextmanager
def _opened(path: str, dir_fd: int | None = None, *, follow: bool = False) -> Iterator[int]:
    fd = os.open(path, _FOLDER_FLAGS & ~os.O_NOFOLLOW if follow else _FOLDER_FLAGS, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def remove_at(parent_fd: int, name: str) -> int:
    """Remove the folder `name` in the folder open at `parent_fd` if it is this user's; 1 if it went, else 0.

    Nothing is followed: the folder and its read-only children are opened with ``O_NOFOLLOW`` (a link in their
    place is never entered, its target never touched), and the removal walks by descriptors.
    """
    try:
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent_fd)
    except OSError:
        return 0
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return 0
        for child in READ_ONLY_CHILDREN:
            with contextlib.suppress(OSError), _opened(child, fd) as child_fd:
                if os.fstat(child_fd).st_uid == os.geteuid():
                    os.fchmod(child_fd, 0o700)  # its entries can then be unlinked
    finally:
        os.close(fd)
    shutil.rmtree(name, ignore_errors=True, dir_fd=parent_fd)
    return 0 if _exists(name, parent_fd) else 1


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def remove_folder(folder: Path) -> None:
    """Remove one of this user's folders made by `new_folder` (a worker's, a run's), following no link."""
    with contextlib.suppress(OSError), _opened(str(folder.parent), follow=True) as parent_fd:
        remove_at(parent_fd, folder.name)
