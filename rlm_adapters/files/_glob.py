"""Glob patterns under allowed roots: refused before anything is listed when they may reach outside, then
matched part by part over the descriptor-based walker (`rlm_adapters.files._walk.Tree`).

Like `glob`, a wildcard does not match a name starting with a dot unless the pattern does, and ``**``
matches any number of folders. Version-control, dependency and cache folders (`SKIPPED_DIRS`) are entered
only when the pattern names them literally. A symlinked folder is matched inside only when it leads to a
place under a root; a folder reached again with the same pattern left (a loop) is matched once.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Sequence
from pathlib import Path

from rlm_adapters.errors import FileLoadError, PathNotAllowedError
from rlm_adapters.files._descriptors import open_error
from rlm_adapters.files._paths import is_under, shown
from rlm_adapters.files._walk import ADD_A_ROOT, SKIPPED_DIRS, Found, Node, Tree


def check_glob(raw: str, pattern: str, tree_paths: Sequence[str]) -> tuple[str, list[str]]:
    """A glob's literal leading folder and its remaining parts, refused when it may reach outside the roots.

    Checked before anything is listed, so that no name outside the roots is ever seen. The message
    names only the glob as spelled.

    Raises:
        PathNotAllowedError: the glob contains ``..`` or its literal folder is outside every root.
    """
    parts = Path(pattern).parts
    if ".." in parts:
        raise PathNotAllowedError(f"the glob {raw!r} contains '..'; globs must stay under the allowed roots")
    literal: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        literal.append(part)
    folder = os.path.normpath(os.path.join(*literal)) if literal else "."
    real = os.path.realpath(folder)
    if not any(is_under(real, root) for root in tree_paths):
        raise PathNotAllowedError(
            f"the glob {raw!r} starts at {shown(folder)}, outside the allowed roots {list(tree_paths)}; {ADD_A_ROOT}"
        )
    return real, list(parts[len(literal) :])


def expand_glob(raw: str, patterns: Sequence[str], tree: Tree, found: Found) -> None:
    """Add a glob's matches, from the first of `patterns` (one per start) that lies under a root and matches.

    Raises:
        PathNotAllowedError: no pattern starts under a root (the first refusal is raised).
        FileLoadError: the glob matched nothing.
    """
    refusal: PathNotAllowedError | None = None
    for pattern in patterns:
        try:
            real, rest = check_glob(raw, pattern, tree.paths)
        except PathNotAllowedError as exc:
            refusal = refusal or exc
            continue
        start = tree.locate(real)
        before = len(found.files) + len(found.skipped)
        if start is not None and (
            match_glob(tree, start, rest, found) or len(found.files) + len(found.skipped) > before
        ):
            return
        refusal = None  # a start under a root was tried: "matched no files" is the truthful answer
    if refusal is not None:
        raise refusal
    raise FileLoadError(f"the glob {raw!r} matched no files")


def match_glob(tree: Tree, start: Node, parts: Sequence[str], found: Found) -> bool:
    """Match glob `parts` below the folder `start`, adding what matches to `found`; True when anything matched."""
    try:
        fd = tree.open(start, directory=True)
    except OSError:
        return False
    try:
        return _GlobWalk(tree, found).match(start, fd, tuple(parts))
    finally:
        os.close(fd)


class _GlobWalk:
    """One glob's matching: the folders it has reached, with how many pattern parts were left there."""

    def __init__(self, tree: Tree, found: Found) -> None:
        self.tree = tree
        self.found = found
        self.seen: set[tuple[int, int, int]] = set()

    def match(self, node: Node, fd: int, parts: tuple[str, ...]) -> bool:
        tree, found = self.tree, self.found
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino, len(parts))
        if key in self.seen:  # a folder reached again (a symlink loop) with the same pattern left
            return False
        self.seen.add(key)
        if not parts:
            tree.walk_open(node, fd, found, [], 0)
            return True
        head, rest = parts[0], parts[1:]
        matched = False
        if head == "**":
            if not rest:  # everything below
                tree.walk_open(node, fd, found, [], 0)
                return True
            matched = self.match(node, fd, rest)
            for entry in tree.entries(node, fd, found):
                if _hidden(entry.name, "*") or entry.name in SKIPPED_DIRS:
                    continue
                matched |= self.descend(node, fd, entry, parts)
            return matched
        for entry in tree.entries(node, fd, found):
            if not fnmatch.fnmatchcase(entry.name, head) or _hidden(entry.name, head):
                continue
            if glob.has_magic(head) and entry.name in SKIPPED_DIRS:
                continue
            if rest:
                matched |= self.descend(node, fd, entry, rest)
            else:
                matched = True
                tree.visit(node, fd, entry, found, [], 0)
        return matched

    def descend(self, node: Node, fd: int, entry: os.DirEntry[str], rest: tuple[str, ...]) -> bool:
        """Go on matching `rest` inside the folder `entry` (a symlinked folder only when under a root)."""
        tree = self.tree
        child = node.child(entry.name)
        if entry.is_symlink():
            target = tree.follow(tree.absolute(child))
            if isinstance(target, str):
                self.found.skip(tree.display(child), target)
                return False
            try:
                child_fd = tree.open(target, directory=True)
            except OSError:
                return False  # a link to a file, or gone: nothing to match inside
            child = target
        elif entry.is_dir(follow_symlinks=False):
            try:
                child_fd = tree.open_child(fd, entry.name)
            except OSError as exc:
                self.found.skip(tree.display(child), open_error(exc))
                return False
        else:
            return False
        try:
            return self.match(child, child_fd, rest)
        finally:
            os.close(child_fd)


def _hidden(name: str, pattern: str) -> bool:
    """Like `glob`: a wildcard does not match a name starting with a dot unless the pattern does."""
    return name.startswith(".") and not pattern.startswith(".")
