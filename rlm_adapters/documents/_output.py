"""Checks of what the converter sends back: it read a hostile document, so nothing it says is trusted.

The converter's stdout is one frame (4-byte big-endian length, a JSON header) and then exactly the number
of text bytes the header announces. Everything is bounded before it is parsed: the whole output by the
job's cap (`oneshot`), the header by `MAX_HEADER_BYTES`; the text must be UTF-8, each place a
``[offset, kind, label]`` with a known kind, an offset inside the text, in order, and a short label.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

PLACE_KINDS = ("page", "slide", "sheet", "cell")
MAX_HEADER_BYTES = 16 * 1024**2
MAX_LABEL_CHARS = 200
MAX_NOTES = 20
MAX_PAGE_LABEL_CHARS = 40
MAX_REASON_CHARS = 300
_HEADER = struct.Struct(">I")


class BadOutput(Exception):
    """The converter's output is not a well-formed answer (the document is skipped, naming this)."""


@dataclass(frozen=True)
class Converted:
    """A document's text as the converter gave it, checked.

    Attributes:
        text: The text.
        size: Its size in UTF-8 bytes (what counts toward a load's byte cap).
        places: ``(offset, kind, label)`` in text order: where each page, slide, sheet or cell starts.
        notes: What the converter said about it (for example, a notebook's outputs were cut).
        page_labels: Each page's own label as the PDF prints it (``xii``, ``79``), by page number from 1,
            when the PDF has labels.
    """

    text: str
    size: int
    places: tuple[tuple[int, str, str], ...] = ()
    notes: tuple[str, ...] = field(default=())
    page_labels: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Refusal:
    """The converter would not convert the document, and why (encrypted, malformed, a zip bomb)."""

    reason: str


def one_line(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """`text` on one line, at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def parse_output(output: bytes, *, text_bytes: int, max_places: int) -> Converted | Refusal:
    """The converter's answer in `output`, checked field by field.

    Raises:
        BadOutput: Anything that is not the converter's protocol (naming what was wrong).
    """
    if len(output) < _HEADER.size:
        raise BadOutput("no answer")
    (length,) = _HEADER.unpack_from(output)
    if length > MAX_HEADER_BYTES or _HEADER.size + length > len(output):
        raise BadOutput(f"a header of {length:,} bytes")
    try:
        header = json.loads(output[_HEADER.size : _HEADER.size + length].decode("utf-8"))
    except (ValueError, RecursionError):
        raise BadOutput("a header that is not JSON") from None
    if not isinstance(header, dict) or header.get("type") != "document" or not isinstance(header.get("ok"), bool):
        raise BadOutput("a header that is not a document answer")
    body = output[_HEADER.size + length :]
    if not header["ok"]:
        reason = header.get("reason")
        if not isinstance(reason, str) or body:
            raise BadOutput("a refusal without a reason")
        return Refusal(one_line(reason))
    size = header.get("text_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size != len(body) or size > text_bytes:
        raise BadOutput(f"{len(body):,} text bytes where it announced {size!r}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadOutput("text that is not UTF-8") from None
    places = _places(header.get("places"), len(text), max_places)
    pages = sum(kind == "page" for _, kind, _ in places)
    return Converted(text, size, places, _notes(header.get("notes")), _page_labels(header.get("page_labels"), pages))


def _places(raw: Any, length: int, cap: int) -> tuple[tuple[int, str, str], ...]:
    if not isinstance(raw, list) or len(raw) > cap:
        raise BadOutput("places that are not a list within the cap")
    places: list[tuple[int, str, str]] = []
    previous = 0
    for item in raw:
        if not (isinstance(item, list) and len(item) == 3):
            raise BadOutput("a place that is not [offset, kind, label]")
        offset, kind, label = item
        if not isinstance(offset, int) or isinstance(offset, bool) or not previous <= offset <= length:
            raise BadOutput(f"a place at {offset!r}, out of order or outside the text")
        if kind not in PLACE_KINDS or not isinstance(label, str) or not 0 < len(label) <= MAX_LABEL_CHARS:
            raise BadOutput("a place of an unknown kind or with a bad label")
        places.append((offset, kind, one_line(label, MAX_LABEL_CHARS)))
        previous = offset
    return tuple(places)


def _notes(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_NOTES or not all(isinstance(note, str) for note in raw):
        raise BadOutput("notes that are not a short list of strings")
    return tuple(one_line(note, MAX_LABEL_CHARS) for note in raw)


def _page_labels(raw: Any, pages: int) -> dict[int, str]:
    """``{page number: its own label}``, each number one of the document's pages, each label short."""
    if raw is None:
        return {}
    if not isinstance(raw, list) or len(raw) > pages:
        raise BadOutput("page labels that are not a list within the pages")
    labels: dict[int, str] = {}
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2):
            raise BadOutput("a page label that is not [page, label]")
        number, label = item
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= pages:
            raise BadOutput(f"a label of page {number!r}, not one of its {pages:,} pages")
        if not isinstance(label, str) or not 0 < len(label) <= MAX_PAGE_LABEL_CHARS:
            raise BadOutput("a page label that is not a short string")
        labels[number] = one_line(label, MAX_PAGE_LABEL_CHARS)
    return labels
