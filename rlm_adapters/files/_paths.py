"""Paths by their spelling alone: whether one lies under a root, and how a name is shown.

Nothing here touches the file system. Callers resolve symlinks first (``realpath``) when what a path
leads to matters; these functions only compare and print what they are given.
"""

from __future__ import annotations

import os


def is_under(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies below it, compared name by name after ``normpath``.

    A sibling that only shares a prefix is not under it (``/a/bc`` is not under ``/a/b``); trailing
    slashes on either side do not matter; every absolute path is under ``/``.

    Args:
        path: The path to test (absolute, like `root`, for the answer to mean anything).
        root: The folder it should lie under.
    """
    path = os.path.normpath(path)
    root = os.path.normpath(root).rstrip("/")  # "/" becomes "", so every absolute path starts with root + "/"
    return path == root or path.startswith(root + "/")


def shown(name: str) -> str:
    """A name as text that always encodes: bytes that are not UTF-8 are shown as ``\\xff`` escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
