"""The documents of a run's context, with line numbers and places found without a pass per line.

A document's path is its ``metadata["path"]``, else its ``id``, else ``context[i]``; a plain string
context is one document named by the caller (``text`` in the MCP server, ``context`` elsewhere), a dict
gives one document per string value. A document converted to text (a PDF, slides, a spreadsheet) may
carry its own places in ``metadata["places"]``: ``[[char_offset, kind, label], ...]`` in text order, e.g.
``[[0, "page", "1"], [2210, "page", "2"]]``, where each place runs until the next one starts.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from rlm_adapters.core import Place, PlaceKind

# Line numbers of a long document are counted from checkpoints this far apart (one C-speed count each).
BLOCK = 1 << 20
# A line longer than this means nothing to cite by (a one-line input, a minified file): it is cited by
# character range, in pieces of `PIECE` characters.
LONG_LINE = 1_000
PIECE = 500
_KINDS = frozenset(get_args(PlaceKind))


@dataclass
class Document:
    """One document of a run's context.

    Attributes:
        path: Its path (or id), as sources name it.
        text: Its text.
        places: Its own places in text order, ``(offset, kind, label)`` (empty for plain text).
        file: Its path names a file the input held (``metadata["path"]``), not an id given to a text.
    """

    path: str
    text: str
    places: Sequence[tuple[int, PlaceKind, str]] = ()
    file: bool = False
    page_labels: Sequence[str] = ()  # a PDF's own label of each page (``metadata["page_labels"]``), or none
    _blocks: list[int] | None = field(default=None, repr=False)  # newlines before each BLOCK

    def line_of(self, offset: int) -> int:
        """The 0-based line holding character `offset`."""
        text = self.text
        if len(text) <= BLOCK:
            return text.count("\n", 0, offset)
        if self._blocks is None:
            counts = [0]
            for start in range(0, len(text), BLOCK):
                counts.append(counts[-1] + text.count("\n", start, start + BLOCK))
            self._blocks = counts
        block = offset // BLOCK
        return self._blocks[block] + text.count("\n", block * BLOCK, offset)

    def lines_of(self, offsets: Sequence[int]) -> list[int]:
        """`line_of` for many offsets at once (counted between neighbours: one pass over the span)."""
        order = sorted(range(len(offsets)), key=offsets.__getitem__)
        lines = [0] * len(offsets)
        previous, line = -1, 0
        for index in order:
            offset = offsets[index]
            if previous < 0 or offset - previous > BLOCK:
                line = self.line_of(offset)
            else:
                line += self.text.count("\n", previous, offset)
            lines[index], previous = line, offset
        return lines

    def line_bounds(self, offset: int) -> tuple[int, int]:
        """``(start, end)`` of the line holding `offset` (without its newline)."""
        text = self.text
        start = text.rfind("\n", 0, offset) + 1
        end = text.find("\n", offset)
        return start, len(text) if end < 0 else end

    def unit(self, offset: int) -> tuple[int, int, int]:
        """``(piece, start, end)`` of the stretch holding `offset` that sources count by: its line (piece 0),
        or on a line over `LONG_LINE` characters, the `PIECE` characters of it around `offset` (piece ``n``
        is characters ``(n - 1) * PIECE`` to ``n * PIECE`` of the text, cut at the line's ends).

        Each bound is looked for at most `LONG_LINE` characters away: never a pass over a 40 MB line.
        """
        text = self.text
        size = len(text)
        before = text.rfind("\n", max(0, offset - LONG_LINE - 1), offset)
        after = text.find("\n", offset, offset + LONG_LINE + 1)
        start = before + 1 if before >= 0 else (0 if offset <= LONG_LINE else -1)
        end = after if after >= 0 else (size if size - offset <= LONG_LINE else -1)
        if start >= 0 and end >= 0 and end - start <= LONG_LINE:
            return 0, start, end
        piece = offset // PIECE
        low, high = piece * PIECE, min(size, (piece + 1) * PIECE)
        start = max(low, text.rfind("\n", low, offset) + 1)
        cut = text.find("\n", offset, high)
        return piece + 1, start, high if cut < 0 else cut

    def long_line(self, offset: int) -> bool:
        """Whether the line holding `offset` is over `LONG_LINE` characters (cited by character range)."""
        return self.unit(offset)[0] > 0

    def place_of(self, start: int, end: int, lines: tuple[int, int] | None = None) -> Place | None:
        """The document's own place(s) covering characters ``start..end``, when it has places.

        A span inside one page, slide or notebook cell also gets its lines inside that place (see `Place`).

        Args:
            start: The span's first character.
            end: Just past its last character.
            lines: The span's first and last 0-based lines of the whole text, when the caller has them.
        """
        if not self.places:
            return None
        offsets = [offset for offset, _, _ in self.places]
        first = bisect.bisect_right(offsets, start) - 1
        last = bisect.bisect_right(offsets, max(start, end - 1)) - 1
        if first < 0:
            return None
        _, kind, label = self.places[first]
        _, last_kind, last_label = self.places[last]
        if last != first:
            same = last_kind != kind or last_label == label
            end_label = None if same else last_label
            return Place(kind, label, end_label, printed=self._printed(kind, label, end_label))
        inside = self._lines_inside(first, lines or tuple(self.lines_of([start, max(start, end - 1)])))
        printed = self._printed(kind, label, None)
        return Place(kind, label, printed=printed) if inside is None else Place(kind, label, None, *inside, printed)

    def _printed(self, kind: str, start: str, end: str | None) -> str | None:
        """The pages' own labels (``79``, ``79-80``) when they differ from the pages' numbers, else None."""
        if kind != "page" or not self.page_labels:
            return None
        numbers = [start] if end is None else [start, end]
        labels = [
            self.page_labels[int(n) - 1] if n.isdigit() and 0 < int(n) <= len(self.page_labels) else n for n in numbers
        ]
        return None if labels == numbers else "-".join(labels)

    def _lines_inside(self, index: int, lines: Sequence[int]) -> tuple[int, int] | None:
        """Lines ``lines`` (0-based, of the whole text) counted from 1 inside place `index`, when it has lines.

        A converter heads a page, slide or notebook cell with a line of its own (``[page 7]``, ``[cell 3: code]``):
        line 1 is the one after it, as the page's text runs. A span of the heading alone has no line inside.
        """
        offset, kind, label = self.places[index]
        if kind == "sheet" or (kind == "cell" and "!" in label):
            return None  # a spreadsheet: rows and cells are its coordinates, not lines
        top = self.line_of(offset)
        heading = f"[{label}" if kind == "cell" else f"[{kind} {label}"
        after = offset + len(heading)
        headed = self.text.startswith(heading, offset) and self.text[after : after + 1] in ("]", ":")
        first, last = lines[0] - top + (not headed), lines[1] - top + (not headed)
        return None if last < 1 else (max(first, 1), last)


def _places(metadata: Any) -> list[tuple[int, PlaceKind, str]]:
    """A document's place map from its metadata, or none when it is missing or malformed."""
    raw = metadata.get("places") if isinstance(metadata, dict) else None
    if not isinstance(raw, list):
        return []
    places: list[tuple[int, PlaceKind, str]] = []
    for item in raw:
        if not (isinstance(item, list | tuple) and len(item) == 3):
            return []
        offset, kind, label = item
        if not isinstance(offset, int) or isinstance(offset, bool) or kind not in _KINDS or not isinstance(label, str):
            return []
        if places and offset < places[-1][0]:
            return []
        places.append((offset, kind, label))
    return places


def _page_labels(metadata: Any) -> list[str]:
    """A document's page labels from its metadata, or none when they are missing or malformed."""
    raw = metadata.get("page_labels") if isinstance(metadata, dict) else None
    if not isinstance(raw, list) or not all(isinstance(label, str) and len(label) <= 40 for label in raw):
        return []
    return raw


def documents_of(context: Any, text_name: str = "context") -> list[tuple[str, str]]:
    """``(path, text)`` of each document of a run's context that has text.

    Args:
        context: A string, a list of strings or ``{"id", "text"/"content", "metadata"}`` dicts, or a dict.
        text_name: The path given to a plain string context.
    """
    return [(document.path, document.text) for document in corpus_of(context, text_name)]


def corpus_of(context: Any, text_name: str = "context") -> list[Document]:
    """The `Document` of each part of a run's context that has text (see `documents_of`)."""
    if isinstance(context, str):
        return [Document(text_name, context)]
    if isinstance(context, dict):
        return [Document(str(key), value) for key, value in context.items() if isinstance(value, str)]
    documents: list[Document] = []
    for index, item in enumerate(context if isinstance(context, list | tuple) else []):
        if isinstance(item, str):
            documents.append(Document(f"context[{index}]", item))
        elif isinstance(item, dict):
            text = item.get("text", item.get("content"))
            if not isinstance(text, str):
                continue
            metadata = item.get("metadata")
            path = metadata.get("path") if isinstance(metadata, dict) else None
            name = str(path or item.get("id") or f"context[{index}]")
            file = isinstance(path, str) and bool(path)
            documents.append(Document(name, text, _places(metadata), file=file, page_labels=_page_labels(metadata)))
    return documents
