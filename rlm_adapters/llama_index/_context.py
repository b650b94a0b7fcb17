"""The context an `RLMQueryEngine` gives its runs: LlamaIndex nodes as ``{"id", "text", "metadata"}`` documents.

Each node with text becomes one document (its metadata made JSON for the sandbox), and the source
tracker's view of it (`tracked_document`) keeps the places a converted document records, so sources cite
``q3.pdf:p7:L4``. A node whose "text" is a file's raw bytes (``%PDF-1.5 ...``: what `SimpleDirectoryReader`
gives a PDF or an Office file without ``llama-index-readers-file``) is left out with a warning that names it
and the way that converts it (`RLMQueryEngine.from_paths`), never handed to a model as if it were text.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode

from rlm_adapters.documents import binary_kind
from rlm_adapters.errors import ContextError
from rlm_adapters.files import SkippedFile
from rlm_adapters.sources import Corpus
from rlm_adapters.sources import Document as SourceDocument


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    """Node metadata as the sandbox can receive it (JSON); other values become strings."""
    safe: dict[str, Any] = {}
    for key, value in metadata.items():
        try:
            json.dumps(value)
            safe[str(key)] = value
        except (TypeError, ValueError):
            safe[str(key)] = str(value)
    return safe


def tracked_document(document: dict[str, Any]) -> SourceDocument:
    """A context document as the tracker reads it: named by its id, with the places and the page labels its
    metadata records (a node's ``page_label`` is the PDF's own label, as LlamaIndex's PDF reader gives it)."""
    (parsed,) = Corpus.of([document]).documents
    # Named by id as before; a file only when the id is the file's own path (as `from_paths` makes them).
    file = parsed.file and parsed.path == document["id"]
    return SourceDocument(document["id"], parsed.text, parsed.places, file=file, page_labels=parsed.page_labels)


BINARY_SHOWN = 3
CONVERT_HINT = (
    "LlamaIndex's SimpleDirectoryReader reads PDFs and Office files as raw bytes unless llama-index-readers-file "
    "is installed; RLMQueryEngine.from_paths([...]) converts them behind the sandbox's walls and keeps their pages"
)


def node_name(node: BaseNode) -> str:
    """What a user calls a node: its file's name as its reader recorded it (``file_name``, else ``file_path``),
    else its id (a random UUID for most readers' documents, which names nothing to a person)."""
    for key in ("file_name", "file_path"):
        value = node.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return node.node_id


def context_of(
    nodes: Sequence[BaseNode], skip_empty: bool
) -> tuple[list[BaseNode], list[dict[str, Any]], list[SkippedFile]]:
    """The nodes that have text, the context built from them, and the nodes left out because their text is a
    file's raw bytes (announced by a warning); a clear error for unusable input."""
    if isinstance(nodes, BaseNode | str) or not isinstance(nodes, Sequence):
        raise ContextError(f"nodes must be a list of LlamaIndex nodes or documents, got {type(nodes).__name__}")
    if not nodes:
        raise ContextError("RLMQueryEngine got no documents: load at least one (e.g. SimpleDirectoryReader(...))")
    kept: list[BaseNode] = []
    documents: list[dict[str, Any]] = []
    binary: list[SkippedFile] = []
    for position, node in enumerate(nodes):
        if not isinstance(node, BaseNode):
            raise ContextError(f"nodes[{position}] is a {type(node).__name__}, not a LlamaIndex node or document")
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        if not text.strip():
            if skip_empty:
                continue
            detail = f"only metadata {sorted(node.metadata)}" if node.metadata else "no text and no metadata"
            raise ContextError(
                f"document {node.node_id!r} (nodes[{position}]) has {detail}; drop documents without text "
                "or pass skip_empty=True"
            )
        kind = binary_kind(text)
        if kind is not None:
            name = node.metadata.get("file_path") or node.metadata.get("file_name") or node.node_id
            binary.append(SkippedFile(str(name), f"its text is the raw bytes of {kind} ({text[:10]!r}...), not text"))
            continue
        kept.append(node)
        documents.append({"id": node.node_id, "text": text, "metadata": _json_safe(dict(node.metadata))})
    if binary:
        shown = "; ".join(f"{s.path}: {s.reason}" for s in binary[:BINARY_SHOWN])
        more = f"; and {len(binary) - BINARY_SHOWN} more" if len(binary) > BINARY_SHOWN else ""
        count = "1 document" if len(binary) == 1 else f"{len(binary)} documents"
        if not kept:
            raise ContextError(f"every document is a file's raw bytes, not text ({shown}{more}); {CONVERT_HINT}")
        warnings.warn(
            f"RLMQueryEngine left out {count} ({shown}{more}); {CONVERT_HINT}; they are listed in engine.skipped",
            stacklevel=4,
        )
    if not kept:
        raise ContextError(f"none of the {len(nodes)} documents has any text; there is nothing to read")
    return kept, documents, binary
