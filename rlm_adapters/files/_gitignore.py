"""A small ``.gitignore`` matcher: globs, ``**``, trailing ``/`` for folders, leading ``/``, ``!`` negation.

Paths are given as tuples of names below the folder the file sits in, so the matcher never touches the
file system (the walker reads each ``.gitignore`` itself, with the same checks as any other file, at most
`GITIGNORE_MAX_BYTES`). Rules of outer folders come first; a deeper file's verdict overrides (`ignored`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

GITIGNORE_MAX_BYTES = 1024**2


class GitIgnore:
    """The rules of one ``.gitignore``.

    Args:
        folder: The names leading to the folder holding the file (below its root).
        text: The file's text.
    """

    def __init__(self, folder: tuple[str, ...], text: str) -> None:
        self.folder = folder
        self.rules: list[tuple[str, bool, bool, bool]] = []  # pattern, negated, dir_only, anchored
        for raw in text.split("\n"):  # as git reads it: U+2028 or \x0c is part of a pattern, not a new one
            line = raw.rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:] if negated else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            self.rules.append((line.lstrip("/"), negated, dir_only, anchored))

    def ignores(self, parts: tuple[str, ...], is_dir: bool) -> bool | None:
        """True/False when a rule decides about `parts`, None when none matches (or it is not below)."""
        if parts[: len(self.folder)] != self.folder or len(parts) == len(self.folder):
            return None
        relative = "/".join(parts[len(self.folder) :])
        decision: bool | None = None
        for pattern, negated, dir_only, anchored in self.rules:
            if dir_only and not is_dir:
                continue
            target = relative if anchored else parts[-1]
            if fnmatch.fnmatchcase(target, pattern) or (
                "**" in pattern and fnmatch.fnmatchcase(relative, pattern.replace("**/", "*"))
            ):
                decision = not negated
        return decision


def ignored(active: Sequence[GitIgnore], parts: tuple[str, ...], is_dir: bool) -> bool:
    """Whether the rules in force (outer folders first) exclude the entry named by `parts`."""
    decision: bool | None = None
    for rule in active:  # a deeper .gitignore overrides
        verdict = rule.ignores(parts, is_dir)
        if verdict is not None:
            decision = verdict
    return bool(decision)
