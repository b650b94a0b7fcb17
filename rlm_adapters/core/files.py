"""Loading files, folders and globs as RLM documents, only from under allowed roots.

Shared by the MCP server and the LangChain `RLMTool`: an agent names paths, and this module decides what
may be read. Every path is resolved (symlinks and ``..`` included) and must land under one of the roots.
Folders are walked recursively, skipping version-control folders, dependency folders, virtual
environments and what ``.gitignore`` files exclude. Binary files are skipped and listed; text that is
not valid UTF-8 is decoded with replacement characters and marked. A total size cap stops a runaway glob
before anything is read.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.errors import RLMError

DEFAULT_MAX_BYTES = 512 * 1024**2
DEFAULT_MAX_FILES = 50_000
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
SNIFF_BYTES = 8192


class PathNotAllowedError(RLMError, ValueError):
    """A path resolves outside every allowed root."""


class FileLoadError(RLMError, ValueError):
    """Paths could not be loaded: missing, nothing matched, or over the size cap."""


@dataclass(frozen=True)
class LoadedFile:
    """One file read as text."""

    path: str
    text: str
    size: int
    invalid_utf8: bool = False


@dataclass(frozen=True)
class SkippedFile:
    """A file that was found but not read, and why."""

    path: str
    reason: str


@dataclass
class LoadResult:
    """What `load_paths` read and skipped."""

    files: list[LoadedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """Bytes of the files read."""
        return sum(f.size for f in self.files)

    def documents(self) -> list[dict[str, Any]]:
        """The files as RLM documents: ``{"id", "text", "metadata"}``."""
        return [
            {
                "id": f.path,
                "text": f.text,
                "metadata": {"path": f.path, "size": f.size, "invalid_utf8": f.invalid_utf8},
            }
            for f in self.files
        ]


def human_bytes(size: float) -> str:
    """``1.5 MiB`` style sizes for messages."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


class _Roots:
    """The allowed roots, resolved once."""

    def __init__(self, roots: Sequence[str | Path], display_base: Path | None = None) -> None:
        if not roots:
            raise FileLoadError("no allowed roots were given; pass at least one folder files may be read from")
        self.paths = [Path(r).expanduser().resolve() for r in roots]
        self.display_base = display_base.resolve() if display_base else None

    def owner(self, path: Path) -> Path | None:
        """The root that contains the resolved `path`, if any."""
        return next((root for root in self.paths if path == root or root in path.parents), None)

    def display(self, path: Path) -> str:
        if self.display_base is not None and path.is_relative_to(self.display_base):
            return path.relative_to(self.display_base).as_posix()
        root = self.owner(path)
        if root is None or root.parent == root:  # under the filesystem root: keep the leading slash
            return str(path)
        relative = path.relative_to(root).as_posix()
        return relative if len(self.paths) == 1 else f"{root.name}/{relative}"


class _GitIgnore:
    """A small .gitignore matcher: globs, ``**``, trailing ``/`` for folders, leading ``/``, ``!`` negation."""

    def __init__(self, folder: Path, lines: list[str]) -> None:
        self.folder = folder
        self.rules: list[tuple[str, bool, bool, bool]] = []  # pattern, negated, dir_only, anchored
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            line = line[1:] if negated else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            self.rules.append((line.lstrip("/"), negated, dir_only, anchored))

    def ignores(self, path: Path, is_dir: bool) -> bool | None:
        """True/False when a rule decides, None when no rule matches."""
        relative = path.relative_to(self.folder).as_posix()
        decision: bool | None = None
        for pattern, negated, dir_only, anchored in self.rules:
            if dir_only and not is_dir:
                continue
            target = relative if anchored else path.name
            if fnmatch.fnmatchcase(target, pattern) or (
                "**" in pattern and fnmatch.fnmatchcase(relative, pattern.replace("**/", "*"))
            ):
                decision = not negated
        return decision


def _read_gitignore(folder: Path) -> _GitIgnore | None:
    path = folder / ".gitignore"
    try:
        return _GitIgnore(folder, path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return None


def _is_virtualenv(folder: Path) -> bool:
    return (folder / "pyvenv.cfg").is_file()


def _walk(folder: Path, roots: _Roots, skipped: list[SkippedFile], ignores: list[_GitIgnore]) -> Iterator[Path]:
    """Files under `folder`, depth first, honouring skip lists and .gitignore files."""
    own = _read_gitignore(folder)
    active = [*ignores, own] if own else ignores
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        skipped.append(SkippedFile(roots.display(folder), f"cannot list folder: {exc.strerror}"))
        return
    for entry in entries:
        path = Path(entry.path)
        is_dir = entry.is_dir(follow_symlinks=True)
        if any(rule.ignores(path, is_dir) for rule in active if path.is_relative_to(rule.folder)):
            continue
        if entry.is_symlink():
            target = path.resolve()
            if roots.owner(target) is None:
                skipped.append(SkippedFile(roots.display(path), "symlink pointing outside the allowed roots"))
                continue
        if is_dir:
            if entry.name in SKIPPED_DIRS or _is_virtualenv(path):
                continue
            yield from _walk(path, roots, skipped, active)
        elif entry.is_file(follow_symlinks=True):
            yield path


def _glob_prefix(pattern: Path) -> Path:
    """The literal folder a glob starts from (the parts before the first wildcard)."""
    literal: list[str] = []
    for part in pattern.parts:
        if glob.has_magic(part):
            break
        literal.append(part)
    return Path(*literal) if literal else Path(".")


def _expand_glob(raw: str, pattern: Path, base: Path, roots: _Roots, skipped: list[SkippedFile]) -> list[Path]:
    """A glob's files. It is checked against the roots *before* it is expanded, so that no name outside
    the roots is ever listed, and its matches skip the same folders as a folder walk does."""
    if ".." in pattern.parts:
        raise PathNotAllowedError(f"the glob {raw!r} contains '..'; name a folder under the allowed roots instead")
    if roots.owner(_glob_prefix(pattern).resolve()) is None:
        raise PathNotAllowedError(
            f"the glob {raw!r} starts outside the allowed roots {[str(r) for r in roots.paths]}; "
            "add a root that contains it (roots= in Python, --root for rlm-mcp)"
        )
    files: list[Path] = []
    outside = 0
    matched = False
    for match in sorted(Path(p) for p in glob.iglob(str(pattern), recursive=True)):
        matched = True
        if SKIPPED_DIRS.intersection(match.parts):
            continue
        if roots.owner(match.resolve()) is None:
            outside += 1  # reached through a symlink: count it, never name it
        elif match.is_dir():
            files.extend(_walk(match.resolve(), roots, skipped, []))
        elif match.is_file():
            files.append(match)
    if not matched:
        raise FileLoadError(f"the glob {raw!r} matched no files (searched from {base})")
    if outside:
        skipped.append(SkippedFile(raw, f"{outside} match(es) lead outside the allowed roots through symlinks"))
    return files


def _expand(raw: str, base: Path | None, roots: _Roots, skipped: list[SkippedFile]) -> list[Path]:
    """The files one entry of `paths` names (a file, a folder, or a glob).

    A relative path is taken from `base` when one is given; otherwise from the working folder, then from
    each root in turn, and the first place where it exists under a root wins.
    """
    expanded = os.path.expanduser(raw)
    relative_bases = [base] if base is not None else [Path.cwd(), *roots.paths]
    bases = [Path("/")] if os.path.isabs(expanded) else relative_bases
    starts = [(folder, folder / expanded) for folder in bases]
    if glob.has_magic(expanded):
        usable = [(f, c) for f, c in starts if roots.owner(_glob_prefix(c).resolve()) is not None]
        folder, chosen = next(
            (s for s in usable if next(glob.iglob(str(s[1]), recursive=True), None) is not None), (usable or starts)[0]
        )
        return _expand_glob(raw, chosen, folder, roots, skipped)
    inside = [c for _, c in starts if roots.owner(c.resolve()) is not None]
    found = next((c for c in inside if c.resolve().exists()), None)
    if found is None:
        outside = [c for _, c in starts if c not in inside]
        refused = next((c for c in outside if c.resolve().exists()), None if inside else outside[0])
        if refused is not None:
            resolved = refused.resolve()
            via = " through a symlink" if refused.is_symlink() or resolved != Path(os.path.abspath(refused)) else ""
            raise PathNotAllowedError(
                f"the path {raw!r} resolves{via} to {resolved}, outside the allowed roots "
                f"{[str(r) for r in roots.paths]}; add a root that contains it (roots= in Python, --root for rlm-mcp)"
            )
        looked = ", ".join(str(c.resolve()) for c in inside)
        raise FileLoadError(f"no such file or folder: {raw!r} (looked at {looked})")
    resolved = found.resolve()
    if resolved.is_dir():
        return list(_walk(resolved, roots, skipped, []))
    return [resolved]


def _read(path: Path, display: str) -> LoadedFile | SkippedFile:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return SkippedFile(display, f"cannot read: {exc.strerror}")
    if b"\x00" in data[:SNIFF_BYTES]:
        return SkippedFile(display, "binary file")
    try:
        return LoadedFile(display, data.decode("utf-8"), len(data))
    except UnicodeDecodeError:
        return LoadedFile(display, data.decode("utf-8", errors="replace"), len(data), invalid_utf8=True)


def load_paths(
    paths: Sequence[str],
    roots: Sequence[str | Path],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    base: str | Path | None = None,
    display_base: str | Path | None = None,
) -> LoadResult:
    """Read files, folders (recursively) and globs from under `roots`.

    Args:
        paths: Files, folders or globs; relative ones are taken from `base`.
        roots: Folders that may be read; everything else is refused.
        max_bytes: Cap on the total size of the matched files, checked before reading.
        max_files: Cap on the number of matched files.
        base: Where relative paths start (default: the working folder, then each root in turn).
        display_base: Name files relative to this folder when they are under it (default: their root).

    Raises:
        PathNotAllowedError: a path resolves outside every root.
        FileLoadError: a path does not exist, nothing matched, or a cap was exceeded.
    """
    if isinstance(paths, str):
        paths = [paths]
    if not paths:
        raise FileLoadError("no paths were given; name at least one file, folder or glob")
    allowed = _Roots(roots, Path(display_base) if display_base is not None else None)
    start = Path(base).expanduser().resolve() if base is not None else None
    result = LoadResult()
    seen: dict[Path, None] = {}
    total = 0
    for raw in paths:
        for path in _expand(str(raw), start, allowed, result.skipped):
            real = path.resolve()
            if real in seen:
                continue
            seen[real] = None
            if len(seen) > max_files:
                raise FileLoadError(f"the paths match more than {max_files:,} files; narrow them (or raise max_files)")
            try:
                total += real.stat().st_size
            except OSError:
                continue
    if total > max_bytes:
        raise FileLoadError(
            f"the paths match {len(seen):,} files totalling {human_bytes(total)}, over the cap of "
            f"{human_bytes(max_bytes)} (--max-bytes); narrow the paths or raise the cap"
        )
    for real in seen:
        outcome = _read(real, allowed.display(real))
        (result.files if isinstance(outcome, LoadedFile) else result.skipped).append(outcome)  # type: ignore[arg-type]
    if not result.files:
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in result.skipped[:5])
        raise FileLoadError(f"no readable text files in {list(paths)!r}" + (f" (skipped {reasons})" if reasons else ""))
    return result
