"""Loading files, folders and globs as RLM documents, only from under allowed roots.

Shared by the MCP server, the LangChain `RLMTool` and ``rlm ask``: an agent names paths, and this module
decides what may be read. A path must resolve (symlinks and ``..`` included) to a place under one of the
roots, and is then opened name by name from the root's descriptor without following symlinks
(`rlm_adapters.files._walk`), so what is read is what was checked; globs are matched by
`rlm_adapters.files._glob`. Folders are walked recursively, skipping
version-control folders, dependency folders, virtual environments and what ``.gitignore`` files exclude.
Only regular files are read, each at most as far as the size cap allows; binary files are skipped and
listed. The host decodes a text file only while it is valid UTF-8: any other (Latin-1, UTF-16, Shift-JIS),
like a compressed file (``.gz``, ``.bz2``, ``.xz``) or a document, is decoded behind the sandbox's walls, where
its encoding is detected and named in its notes. A problem with one
entry (a symlink loop, a FIFO, a file that vanished) skips that entry with a reason; the call goes on.
"""

from __future__ import annotations

import glob
import os
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rlm_adapters.core.adapter_kit import human_bytes
from rlm_adapters.documents import TEXT, ConversionProgress, DocumentLimits, Format, format_of, unsupported_reason
from rlm_adapters.errors import FileLoadError, PathNotAllowedError
from rlm_adapters.files._descriptors import kind_of, open_error, read_at_most
from rlm_adapters.files._documents import convert_found
from rlm_adapters.files._glob import expand_glob
from rlm_adapters.files._loaded import LoadedFile, LoadResult, SkippedFile
from rlm_adapters.files._paths import shown
from rlm_adapters.files._walk import ADD_A_ROOT, Found, Node, Tree, WalkLimits

DEFAULT_MAX_BYTES = 512 * 1024**2
DEFAULT_MAX_FILES = 50_000
DEFAULT_MAX_ENTRIES = 1_000_000
# How each cap is raised, as Python callers spell it; a CLI or server passes its own flags (`cap_names`).
PYTHON_CAP_NAMES = {"max_bytes": "max_bytes=", "max_files": "max_files="}
SNIFF_BYTES = 8192
# Text in UTF-16 or UTF-32 holds NUL bytes: its byte-order mark tells it from a binary file.
WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def _expand(raw: str, starts: Sequence[str], tree: Tree, found: Found) -> None:
    """Add the files one entry of `paths` names (a file, a folder, or a glob) to `found`.

    A relative entry is tried from each of `starts` in turn (the working folder, then each root, unless
    the caller gave a base): the first place where it exists under a root wins.
    """
    expanded = os.path.expanduser(raw)
    if os.path.isabs(expanded):
        starts = ["/"]
    if glob.has_magic(expanded):
        expand_glob(raw, [os.path.join(start, expanded) for start in starts], tree, found)
        return
    candidates = list(dict.fromkeys(os.path.normpath(os.path.join(start, expanded)) for start in starts))
    inside = [c for c in candidates if tree.inside(c)]
    lexical = next((c for c in inside if os.path.lexists(c)), None)
    if lexical is None:
        outside = [c for c in candidates if c not in inside]
        refused = next((c for c in outside if os.path.lexists(c)), None if inside else outside[0])
        if refused is not None:
            # The path as spelled, made absolute: nothing about where a symlink leads, or what is there.
            raise PathNotAllowedError(
                f"the path {raw!r} ({shown(refused)}) is outside the allowed roots {tree.paths}; {ADD_A_ROOT}"
            )
        looked = ", ".join(shown(c) for c in inside)
        raise FileLoadError(f"no such file or folder: {raw!r} (looked at {looked})")
    target = tree.follow(lexical)
    if isinstance(target, str):
        # Say only what the spelling of the path shows: nothing about where a symlink leads, or what is there.
        raise PathNotAllowedError(
            f"the path {raw!r} leads through a symlink outside the allowed roots {tree.paths}; {ADD_A_ROOT}"
        )
    try:
        st = os.stat(tree.absolute(target), follow_symlinks=False)
    except FileNotFoundError:
        raise FileLoadError(f"no such file or folder: {raw!r} (looked at {shown(tree.absolute(target))})") from None
    except OSError as exc:
        found.skip(tree.display(target), open_error(exc))
        return
    if stat.S_ISDIR(st.st_mode):
        tree.walk_node(target, found, [])
    elif stat.S_ISREG(st.st_mode):
        found.add(target, st, tree.display(target))
    else:
        found.skip(tree.display(target), kind_of(st.st_mode))


def _read(tree: Tree, node: Node, budget: int, max_bytes_name: str) -> LoadedFile | SkippedFile | None:
    """Read one listed file from a fresh descriptor: a regular file, at most `budget` bytes; None for text that is
    not UTF-8, which is decoded behind the walls (its encoding detected there, never on the host)."""
    display = tree.display(node)
    try:
        fd = tree.open(node, directory=False)
    except OSError as exc:
        return SkippedFile(display, open_error(exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return SkippedFile(display, kind_of(st.st_mode))
        if st.st_size > budget:
            raise FileLoadError(
                f"{display} grew to {human_bytes(st.st_size)} while the paths were read, over what is left of "
                f"the cap ({max_bytes_name}); narrow the paths or raise the cap"
            )
        # Only what the file held when it was checked: a file growing meanwhile is read as it was.
        data = read_at_most(fd, st.st_size)
    except OSError as exc:
        return SkippedFile(display, f"cannot read: {exc.strerror}")
    finally:
        os.close(fd)
    if b"\x00" in data[:SNIFF_BYTES] and not data.startswith(WIDE_BOMS):
        return SkippedFile(display, unsupported_reason(display) or "binary file")
    try:
        return LoadedFile(display, data.decode("utf-8"), len(data))
    except UnicodeDecodeError:
        reason = unsupported_reason(display)
        return None if reason is None else SkippedFile(display, reason)


def load_paths(
    paths: Sequence[str],
    roots: Sequence[str | Path],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_files: int = DEFAULT_MAX_FILES,
    base: str | Path | None = None,
    display_base: str | Path | None = None,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    documents: DocumentLimits | None = None,
    progress: Callable[[ConversionProgress], None] | None = None,
    cap_names: Mapping[str, str] | None = None,
) -> LoadResult:
    """Read files, folders (recursively) and globs from under `roots`.

    Args:
        paths: Files, folders or globs; relative ones are taken from `base`, else from the working folder,
            then from each root in turn.
        roots: Folders that may be read; everything else is refused.
        max_bytes: Cap on the total size of the matched files, checked before reading and while reading.
        max_files: Cap on the number of matched files.
        base: Where relative paths start (default: the working folder, then each root in turn).
        display_base: Name files relative to this folder when they are under it (default: their root).
        timeout: Seconds the whole load may take (listing and reading); None for no limit.
        cancel: When set (from another thread), the load stops at the next entry.
        max_entries: Cap on the folder entries listed while walking and globbing.
        documents: Limits of each document's conversion (PDF, Office, HTML, EPUB, notebooks...; see
            `rlm_adapters.documents.DocumentLimits`): documents are converted behind the sandbox's walls,
            in parallel, and count toward `max_bytes` by their converted text (their own size is bounded
            by ``max_document_bytes`` instead).
        progress: Hears ``converting 12/40 PDFs`` while documents are converted (from this thread).
        cap_names: How the caller's interface spells ``max_bytes`` and ``max_files`` in its errors (a CLI:
            ``{"max_bytes": "--max-bytes"}``); default the keyword arguments (``max_bytes=``).

    Raises:
        PathNotAllowedError: a path resolves outside every root.
        FileLoadError: a path does not exist, nothing matched, a cap was exceeded, the time ran out, or
            the load was cancelled.
    """
    if isinstance(paths, str):
        paths = [paths]
    unknown = sorted(set(cap_names or {}) - set(PYTHON_CAP_NAMES))
    if unknown:
        raise ValueError(f"cap_names names no cap: {', '.join(map(repr, unknown))}; use 'max_bytes' or 'max_files'")
    names = {**PYTHON_CAP_NAMES, **(cap_names or {})}
    if not paths:
        raise FileLoadError("no paths were given; name at least one file, folder or glob")
    if not roots:
        raise FileLoadError("no allowed roots were given; pass at least one folder files may be read from")
    limits = WalkLimits(max_entries, None if timeout is None else time.monotonic() + timeout, cancel)
    resolved = [Path(os.path.realpath(os.path.expanduser(r))) for r in roots]
    shown_base = Path(os.path.realpath(display_base)) if display_base is not None else None
    tree = Tree(resolved, shown_base, limits)
    try:
        starts = [os.path.realpath(os.path.expanduser(base))] if base is not None else [os.getcwd(), *tree.paths]
        found = Found(max_files, names["max_files"])
        for raw in paths:
            _expand(str(raw), starts, tree, found)
        texts: list[Node] = []
        docs: list[tuple[Node, Format]] = []
        total = 0
        for node, size in found.files.values():
            fmt = format_of(node.parts[-1]) if node.parts else None
            if fmt is None:
                texts.append(node)
                total += size
            else:  # counted by its converted text, known once converted (its own size is capped apart)
                docs.append((node, fmt))
        if total > max_bytes:
            raise FileLoadError(
                f"the paths match {len(texts):,} files totalling {human_bytes(total)}, over the cap of "
                f"{human_bytes(max_bytes)} ({names['max_bytes']}); narrow the paths or raise the cap"
            )
        result = LoadResult(skipped=[SkippedFile(path, reason) for path, reason in found.skipped])
        read = 0
        outcomes: dict[Node, LoadedFile | SkippedFile] = {}
        for node in texts:
            limits.check()
            outcome = _read(tree, node, max_bytes - read, names["max_bytes"])
            if outcome is None:
                docs.append((node, TEXT))
                continue
            outcomes[node] = outcome
            if isinstance(outcome, LoadedFile):
                read += outcome.size
        if docs:
            budget = max_bytes - read
            document_limits = documents or DocumentLimits()
            converted = convert_found(tree, docs, document_limits, limits, budget, progress, names["max_bytes"])
            outcomes.update((node, outcome) for (node, _), outcome in zip(docs, converted, strict=True))
        for node, _size in found.files.values():
            outcome = outcomes[node]
            if isinstance(outcome, LoadedFile):
                result.files.append(outcome)
            else:
                result.skipped.append(outcome)
    finally:
        tree.close()
    if not result.files:
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in result.skipped[:5])
        raise FileLoadError(f"no readable text files in {list(paths)!r}" + (f" (skipped {reasons})" if reasons else ""))
    return result
