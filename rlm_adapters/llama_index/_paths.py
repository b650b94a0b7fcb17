"""Files, folders and globs as LlamaIndex documents, read by the project's loader (`rlm_adapters.files`).

`RLMQueryEngine.from_paths` uses this instead of LlamaIndex's readers: a PDF, an Office file or a notebook
is converted inside the sandbox's walls (the host never parses it), and each document keeps the places
its converter recorded (``pages``, ``slides``, ``sheets``, ``cells``, ``places``), from which the engine's
source nodes name the page and the line. Files that could not be read are returned, never dropped.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from llama_index.core.schema import Document

from rlm_adapters.documents import ConversionProgress, DocumentLimits
from rlm_adapters.files import LoadResult, SkippedFile, load_paths

# The metadata that describes a whole converted document: kept for model code (which selects by page),
# left out of the text LlamaIndex gives its own LLMs and embedders (a 500-page PDF's map is long).
MAP_KEYS = ("places", "pages", "slides", "sheets", "cells", "notes")
_QUIET_KEYS = (*MAP_KEYS, "path", "size", "raw_size", "invalid_utf8")
_SKIPPED_SHOWN = 10


def _folders(value: str | Path | Sequence[str | Path], name: str) -> list[str | Path]:
    """One folder or path, or a list of them, as a list (a bare string is one name, not its characters)."""
    if isinstance(value, str | Path):
        return [value]
    if not isinstance(value, Sequence) or not all(isinstance(item, str | Path) for item in value):
        raise TypeError(f"{name} must be a path or a list of paths, got {value!r}")
    return list(value)


def load_documents(
    paths: str | Path | Sequence[str | Path],
    roots: str | Path | Sequence[str | Path] | None,
    *,
    max_bytes: int,
    max_files: int,
    document_limits: DocumentLimits | None,
    progress: Callable[[ConversionProgress], None] | None,
) -> tuple[list[Document], list[SkippedFile]]:
    """The files `paths` names under `roots` (default: the working folder) as LlamaIndex documents.

    Each document's id is the file's name as results show it (relative to its root); its metadata has
    ``file_path``, ``file_name`` and the loader's own (``path``, ``size``, ``format``, places...).

    Returns:
        The documents, and the files skipped (each with its reason), also announced by a warning.

    Raises:
        PathNotAllowedError: a path lies (or leads through a symlink) outside every root.
        FileLoadError: a path does not exist, a cap was exceeded, or nothing could be read.
    """
    folders = _folders(roots, "roots") if roots is not None else [Path.cwd()]
    loaded: LoadResult = load_paths(
        [str(path) for path in _folders(paths, "paths")],
        folders,
        max_bytes=max_bytes,
        max_files=max_files,
        documents=document_limits,
        progress=progress,
    )
    documents = [
        Document(
            id_=item["id"],
            text=item["text"],
            metadata={"file_path": item["id"], "file_name": os.path.basename(item["id"]), **item["metadata"]},
            excluded_llm_metadata_keys=list(_QUIET_KEYS),
            excluded_embed_metadata_keys=list(_QUIET_KEYS),
        )
        for item in loaded.documents()
    ]
    if loaded.skipped:
        shown = "; ".join(f"{s.path}: {s.reason}" for s in loaded.skipped[:_SKIPPED_SHOWN])
        more = len(loaded.skipped) - _SKIPPED_SHOWN
        count = "1 file" if len(loaded.skipped) == 1 else f"{len(loaded.skipped)} files"
        warnings.warn(
            f"RLMQueryEngine.from_paths skipped {count} ({shown}"
            + (f"; and {more} more" if more > 0 else "")
            + "); they are listed in engine.skipped",
            stacklevel=3,
        )
    return documents, list(loaded.skipped)
