"""Walking folders under allowed roots without following anything the roots do not contain.

Every file and folder is reached from a root's directory descriptor, one name at a time, with
``O_NOFOLLOW``: the path that is read is the path that was checked, so swapping a folder for a symlink
during a call makes that entry fail instead of reading through it. A symlink met on the way is resolved
once (``realpath``) and followed only to a place under a root, again name by name from that root.
Folders are tracked by ``(st_dev, st_ino)``, so symlink loops end. Only regular files are listed;
FIFOs, sockets and devices are never opened. Every problem with one entry becomes a skipped entry with a
reason; the walk itself is bounded by a count of entries, a deadline and a cancel flag (`WalkLimits`).
Glob patterns are matched over this walker by `rlm_adapters.files._glob`; ``.gitignore`` rules come from
`rlm_adapters.files._gitignore`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlm_adapters.errors import FileLoadError
from rlm_adapters.files._descriptors import kind_of, open_error, read_at_most
from rlm_adapters.files._gitignore import GITIGNORE_MAX_BYTES, GitIgnore, ignored
from rlm_adapters.files._paths import is_under, shown

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".idea",
        ".eggs",
    }
)
MAX_DEPTH = 64  # folders deeper than this are skipped: each open level holds a descriptor
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
OUTSIDE = "symlink pointing outside the allowed roots"
ADD_A_ROOT = "add a root that contains it (roots= in Python, --root for rlm-mcp)"


def hard_link(names: int) -> str:
    """Why a hard-linked file is not read: its other names may be outside the roots (a link planted in a shared
    or unpacked folder reads any file its maker could name), and nothing tells where they are."""
    return f"a hard link ({names} names share the file, maybe outside the allowed roots); not read: copy it in"


@dataclass(frozen=True)
class Node:
    """A place under a root: the root's index and the real names below it (none of them a symlink)."""

    root: int
    parts: tuple[str, ...]

    def child(self, name: str) -> Node:
        return Node(self.root, (*self.parts, name))


@dataclass
class WalkLimits:
    """How far one load may go: entries listed, a deadline and a cancel flag."""

    max_entries: int
    deadline: float | None = None
    cancel: threading.Event | None = None
    entries: int = 0

    def tick(self) -> None:
        """Count one listed entry; raise when the listing is over its count, out of time or cancelled."""
        self.entries += 1
        if self.entries > self.max_entries:
            raise FileLoadError(
                f"listing the paths stopped after {self.max_entries:,} entries; narrow the paths or globs"
            )
        if self.entries % 64 == 0:
            self.check()

    def check(self) -> None:
        """Raise when out of time or cancelled."""
        if self.cancel is not None and self.cancel.is_set():
            raise FileLoadError("reading the paths was cancelled")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise FileLoadError("reading the paths took longer than the time allowed; narrow the paths or globs")


@dataclass
class Found:
    """Regular files found so far (deduplicated by device and inode) and entries skipped with a reason."""

    max_files: int
    max_files_name: str = "max_files="  # how the caller's interface spells the cap, for its error
    files: dict[tuple[int, int], tuple[Node, int]] = field(default_factory=dict)  # (dev, ino) -> node, size
    skipped: list[tuple[str, str]] = field(default_factory=list)
    _skipped_keys: set[str] = field(default_factory=set)

    def skip(self, path: str, reason: str) -> None:
        """Note an entry that is not read (once, however many globs reach it)."""
        if path not in self._skipped_keys:  # the first reason found is the one kept
            self._skipped_keys.add(path)
            self.skipped.append((path, reason))

    def add(self, node: Node, st: os.stat_result, name: str = "") -> None:
        """List a regular file `node` (named `name` in results), unless it is a hard link (skipped)."""
        if st.st_nlink > 1:
            self.skip(name or "/".join(node.parts), hard_link(st.st_nlink))
            return
        key = (st.st_dev, st.st_ino)
        if key in self.files:
            return
        self.files[key] = (node, st.st_size)
        if len(self.files) > self.max_files:
            raise FileLoadError(
                f"the paths match more than {self.max_files:,} files; narrow them (or raise {self.max_files_name})"
            )


class Tree:
    """The allowed roots, each held open as a directory descriptor for the length of one load.

    Args:
        roots: The allowed folders.
        display_base: Name files relative to this folder when they are under it (default: their root).
        limits: Bounds on listing.
    """

    def __init__(self, roots: Sequence[Path], display_base: Path | None, limits: WalkLimits) -> None:
        self.paths = [str(root) for root in roots]
        self.display_base = str(display_base) if display_base is not None else None
        self.limits = limits
        self.fds: list[int] = []
        self._visiting: set[tuple[int, int]] = set()  # folders on the current walk's path (a loop)
        self._walked: set[tuple[int, int]] = set()  # folders already walked by this load
        try:
            for root in self.paths:
                self.fds.append(os.open(root, _DIR_FLAGS))
        except OSError as exc:
            self.close()
            raise FileLoadError(f"the allowed root {root!r} cannot be opened: {exc.strerror}") from exc

    def close(self) -> None:
        """Close the roots' descriptors."""
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()

    # -- naming ---------------------------------------------------------------------------------------
    def locate(self, real: str) -> Node | None:
        """The node for a resolved absolute path, under the most specific root that holds it."""
        best: Node | None = None
        for index, root in enumerate(self.paths):
            if is_under(real, root):
                parts = tuple(p for p in real[len(root) :].split("/") if p)
                if best is None or len(parts) < len(best.parts):
                    best = Node(index, parts)
        return best

    def inside(self, lexical: str) -> bool:
        """Whether a path lies under a root by its spelling alone (no file system access)."""
        return any(is_under(lexical, root) for root in self.paths)

    def absolute(self, node: Node) -> str:
        root = self.paths[node.root]
        return os.path.join(root, *node.parts) if node.parts else root

    def display(self, node: Node) -> str:
        """How a node is named in results: relative to the display base or its root, escaped."""
        full = self.absolute(node)
        base = self.display_base
        if base is not None and is_under(full, base):
            relative = full[len(base) :].lstrip("/") or "."
        elif self.paths[node.root] == "/":  # under the filesystem root: keep the leading slash
            relative = "/" + "/".join(node.parts)
        else:
            relative = "/".join(node.parts) or "."
            if len(self.paths) > 1:
                relative = f"{Path(self.paths[node.root]).name}/{relative}"
        return shown(relative)

    # -- opening --------------------------------------------------------------------------------------
    def open(self, node: Node, *, directory: bool, linked: bool = False) -> int:
        """Open `node` name by name from its root's descriptor, following no symlink.

        Args:
            node: What to open.
            directory: Whether it is a folder.
            linked: Accept a regular file with several names (hard links); by default one is refused here too,
                at the moment it is read, as the listing refuses it (it may have been linked since).

        Raises:
            OSError: a name is missing, or is a symlink (``ELOOP`` / ``ENOTDIR``) because it changed, or the file
                is a hard link (``EMLINK``).
        """
        fd = os.dup(self.fds[node.root])
        try:
            for i, name in enumerate(node.parts):
                last = i == len(node.parts) - 1
                flags = _DIR_FLAGS if directory or not last else _FILE_FLAGS
                parent, fd = fd, -1
                try:
                    fd = os.open(name, flags, dir_fd=parent)
                finally:
                    os.close(parent)
            if not directory and not linked:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    raise OSError(errno.EMLINK, f"it is {hard_link(st.st_nlink)}")
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return fd

    def open_child(self, parent_fd: int, name: str) -> int:
        """Open the folder `name` inside the open folder `parent_fd`, following no symlink.

        Raises:
            OSError: it is missing, not a folder, or a symlink (``ELOOP`` / ``ENOTDIR``).
        """
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)

    def follow(self, lexical: str) -> Node | str:
        """Where the symlink (or path) `lexical` leads: a node under a root, or why it is not followed.

        The reason for a target outside the roots is the same whether or not it exists.
        """
        real = os.path.realpath(lexical)
        node = self.locate(real)
        return OUTSIDE if node is None else node

    # -- walking --------------------------------------------------------------------------------------
    def add_target(self, node: Node, found: Found, ignores: list[GitIgnore], depth: int, name: str) -> None:
        """Add what a resolved symlink target is: a file, a folder (walked), or an entry skipped as `name`."""
        try:
            st = os.stat(self.absolute(node), follow_symlinks=False)
        except OSError as exc:
            missing = exc.errno == errno.ENOENT
            found.skip(name, "its target does not exist" if missing else open_error(exc))
            return
        if stat.S_ISDIR(st.st_mode):
            self.walk_node(node, found, ignores, depth)
        elif stat.S_ISREG(st.st_mode):
            found.add(node, st, name)
        else:
            found.skip(name, kind_of(st.st_mode))

    def walk_node(
        self, node: Node, found: Found, ignores: list[GitIgnore], depth: int = 0, parent_fd: int | None = None
    ) -> None:
        """Open folder `node` and walk it.

        Args:
            node: The folder.
            found: Where files and skipped entries go.
            ignores: The ``.gitignore`` rules in force above it.
            depth: How deep it is below the walk's start.
            parent_fd: Its parent folder, already open: `node` is opened from it by its last name (following no
                symlink) instead of name by name from its root.
        """
        try:
            fd = self.open(node, directory=True) if parent_fd is None else self.open_child(parent_fd, node.parts[-1])
        except OSError as exc:
            found.skip(self.display(node), open_error(exc))
            return
        try:
            self.walk_open(node, fd, found, ignores, depth)
        finally:
            os.close(fd)

    def walk_open(self, node: Node, fd: int, found: Found, ignores: list[GitIgnore], depth: int) -> None:
        """Walk folder `node`, already open as `fd` (the caller closes it); each folder is walked once."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key in self._visiting:
            found.skip(self.display(node), "reached again through a symlink (a loop); not read twice")
            return
        if key in self._walked:
            return  # named twice (or reached again through a symlink): its files are already listed
        if depth > MAX_DEPTH:
            found.skip(self.display(node), f"folder nested more than {MAX_DEPTH} levels deep")
            return
        self._visiting.add(key)
        self._walked.add(key)
        try:
            own = self._gitignore(node, fd, found)
            active = [*ignores, own] if own is not None else ignores
            for entry in self.entries(node, fd, found):
                self.visit(node, fd, entry, found, active, depth)
        finally:
            self._visiting.discard(key)

    def visit(
        self, node: Node, fd: int, entry: os.DirEntry[str], found: Found, active: list[GitIgnore], depth: int
    ) -> None:
        """Add what one entry of folder `node` (open as `fd`) is: a file, a folder walked, a symlink followed
        only to a place under a root, or an entry skipped with a reason; ignored entries are passed over."""
        child = node.child(entry.name)
        is_link = entry.is_symlink()
        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
        if ignored(active, child.parts, is_dir):
            return
        if is_link:
            target = self.follow(self.absolute(child))
            if isinstance(target, str):
                found.skip(self.display(child), target)
            else:
                self.add_target(target, found, active, depth + 1, self.display(child))
        elif is_dir:
            if entry.name in SKIPPED_DIRS or _is_virtualenv(fd, entry.name):
                return
            self.walk_node(child, found, active, depth + 1, parent_fd=fd)
        else:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                found.skip(self.display(child), open_error(exc))
                return
            if stat.S_ISREG(st.st_mode):
                found.add(child, st, self.display(child))
            else:
                found.skip(self.display(child), kind_of(st.st_mode))

    def entries(self, node: Node, fd: int, found: Found) -> list[os.DirEntry[str]]:
        """The entries of folder `node` (open as `fd`), sorted by name, each counted against the limits."""
        try:
            with os.scandir(fd) as listing:
                entries = []
                for entry in listing:
                    self.limits.tick()
                    entries.append(entry)
        except OSError as exc:
            found.skip(self.display(node), f"cannot list folder: {exc.strerror}")
            return []
        return sorted(entries, key=lambda e: e.name)

    def _gitignore(self, node: Node, fd: int, found: Found) -> GitIgnore | None:
        """The folder's ``.gitignore``, read with the same checks as any file (a bad one is skipped)."""
        child = node.child(".gitignore")
        try:
            st = os.stat(".gitignore", dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        target: Node | str = child
        if stat.S_ISLNK(st.st_mode):
            target = self.follow(self.absolute(child))
        if isinstance(target, str):
            found.skip(self.display(child), f"{target}; its rules were not applied")
            return None
        try:
            text = self.read_text(target, GITIGNORE_MAX_BYTES)
        except ValueError as exc:
            found.skip(self.display(child), f"{exc}; its rules were not applied")
            return None
        return GitIgnore(node.parts, text)

    def read_text(self, node: Node, cap: int) -> str:
        """A small regular file's text (for ``.gitignore``), at most `cap` bytes, else ValueError.

        A hard link is read here: its text only decides which names under the roots are passed over and never
        reaches a model, and refusing it would read the files it ignores.
        """
        try:
            fd = self.open(node, directory=False, linked=True)
        except OSError as exc:
            raise ValueError(open_error(exc)) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(kind_of(st.st_mode))
            data = read_at_most(fd, cap + 1)
        finally:
            os.close(fd)
        if len(data) > cap:
            raise ValueError(f"larger than {cap:,} bytes")
        return data.decode("utf-8", errors="replace")


def _is_virtualenv(parent_fd: int, name: str) -> bool:
    try:
        st = os.stat(os.path.join(name, "pyvenv.cfg"), dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode)
