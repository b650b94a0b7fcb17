"""Source nodes by place: the pages (slides, sheets, notebook cells) of a converted document a run read.

A document converted to text records its places (``metadata["places"]``, see `rlm_adapters.documents`).
What a run read of it is split at those places, and each place read (a page, a slide, a notebook cell, a
sheet with its cells) becomes a source node of its own, as LlamaIndex's PDF reader makes one node per page:
its text is the place's, its metadata names the file and the place (``{"file_path": "q3.pdf", "page": 7,
"page_label": "7", "line_start": 4, "line_end": 4, "place": "p7:L4", ...}``), lines counted inside the page
as every adapter's sources count them.
"""

from __future__ import annotations

import bisect
from typing import Any

from llama_index.core.schema import BaseNode, NodeRelationship, NodeWithScore, TextNode

from rlm_adapters.core import Place, PlaceKind
from rlm_adapters.llama_index._paths import MAP_KEYS
from rlm_adapters.sources import Document

_RANGE_KEYS = ["rlm_char_ranges", "rlm_line_ranges"]


def units(document: Document) -> list[tuple[int, PlaceKind, str]]:
    """The document's places as source nodes group them: ``(start, kind, label)`` in text order.

    A page, a slide or a notebook cell is one unit; a spreadsheet's sheet and its cells are one (a read of
    a table is one node, ``Q3!B2:D9``, not one per cell). Text before the first place belongs to the first.
    """
    found: list[tuple[int, PlaceKind, str]] = []
    for offset, kind, label in document.places:
        unit: tuple[PlaceKind, str] = ("sheet", _sheet_of(label)) if kind == "cell" and "!" in label else (kind, label)
        if found and found[-1][1:] == unit:
            continue
        found.append((0 if not found else offset, *unit))
    return found


def _sheet_of(cell: str) -> str:
    """The sheet a cell label names (``'Q3 Sales'!C5`` -> ``Q3 Sales``), as its sheet place is labelled."""
    sheet = cell.rsplit("!", 1)[0]
    if len(sheet) >= 2 and sheet[0] == sheet[-1] == "'":
        return sheet[1:-1].replace("''", "'")
    return sheet


def _pieces(
    groups: list[tuple[int, PlaceKind, str]], length: int, ranges: list[tuple[int, int]]
) -> dict[int, list[tuple[int, int]]]:
    """`ranges` cut at the units' bounds, grouped by the index of the unit each piece lies in."""
    starts = [offset for offset, _, _ in groups]
    grouped: dict[int, list[tuple[int, int]]] = {}
    for start, end in ranges:
        index = max(bisect.bisect_right(starts, start) - 1, 0)
        while index < len(starts) and starts[index] < end:
            bottom = starts[index + 1] if index + 1 < len(starts) else length
            low, high = max(start, starts[index]), min(end, bottom)
            if low < high:
                grouped.setdefault(index, []).append((low, high))
            index += 1
    return grouped


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``start..end`` without the whitespace at its edges (a newline that reached a model names no line),
    unless it is all whitespace."""
    low, high = start, end
    while low < high and text[low].isspace():
        low += 1
    while high > low and text[high - 1].isspace():
        high -= 1
    return (low, high) if low < high else (start, end)


def _value(label: str) -> int | str:
    return int(label) if label.isdigit() else label


def place_sources(node: BaseNode, document: Document, ranges: list[tuple[int, int]]) -> list[NodeWithScore]:
    """One source node per place of `document` that `ranges` (what reached a model) touch, in text order.

    Args:
        node: The document's own node (its metadata is carried over; it is not changed).
        document: The document as the source tracker reads it, with its places.
        ranges: The character ranges of it that reached a model.
    """
    sources: list[NodeWithScore] = []
    groups = units(document)
    length = len(document.text)
    kept = {key: value for key, value in node.metadata.items() if key not in MAP_KEYS}
    for index, pieces in sorted(_pieces(groups, length, ranges).items()):
        top, kind, label = groups[index]
        bottom = groups[index + 1][0] if index + 1 < len(groups) else length
        first, last = _trimmed(document.text, pieces[0][0], pieces[-1][1])
        place = document.place_of(first, last) or Place(kind, label)
        ends = [offset for start, end in pieces for offset in (start, max(start, end - 1))]
        lines = document.lines_of(ends)
        metadata: dict[str, Any] = {
            **kept,
            kind: _value(label),
            "line_start": place.line_start,
            "line_end": place.line_end,
            "place": str(place),
            "rlm_char_ranges": [[start, end] for start, end in pieces],
            "rlm_line_ranges": [[lines[i] + 1, lines[i + 1] + 1] for i in range(0, len(lines), 2)],
        }
        if kind == "page":
            # The key LlamaIndex's PDF reader gives its page nodes: the PDF's own label, where it has labels.
            labels = document.page_labels
            number = int(label) if label.isdigit() else 0
            metadata["page_label"] = labels[number - 1] if 0 < number <= len(labels) else label
        quiet = [*node.excluded_llm_metadata_keys, *_RANGE_KEYS]
        page = TextNode(
            id_=f"{node.node_id}:{Place(kind, label)}",
            text=document.text[top:bottom],
            metadata=metadata,
            start_char_idx=top,
            end_char_idx=bottom,
            excluded_llm_metadata_keys=[key for key in quiet if key not in MAP_KEYS],
            excluded_embed_metadata_keys=[
                key for key in [*node.excluded_embed_metadata_keys, *_RANGE_KEYS] if key not in MAP_KEYS
            ],
            relationships={NodeRelationship.SOURCE: node.as_related_node_info()},
        )
        used = sum(end - start for start, end in pieces)
        sources.append(NodeWithScore(node=page, score=used / (bottom - top) if bottom > top else None))
    return sources
