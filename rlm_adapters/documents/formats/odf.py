"""OpenDocument text, spreadsheets and presentations (.odt, .ods, .odp), standard library only.

``content.xml`` is read once the archive passed the zip-bomb check: text documents give headings (``#``),
paragraphs, list items and table rows; a spreadsheet gives one place per sheet and per non-empty cell
(``Sheet1!B3``, as for .xlsx); a presentation gives one place per slide (``[slide N]``). Repeated empty
rows and columns (``number-*-repeated``) only move the address: they write nothing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

_NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
}
MAX_REPEAT = 1_048_576


def _tag(prefix: str, name: str) -> str:
    return f"{{{_NS[prefix]}}}{name}"


def _body(handle: IO[bytes], out: TextOut, kind: str) -> ET.Element:
    archive = out.open_zip(handle)
    try:
        root = ET.fromstring(archive.read("content.xml"))
    except (KeyError, ET.ParseError) as exc:
        out.refuse(f"malformed OpenDocument file: {exc}")
    body = root.find(f"{_tag('office', 'body')}/{_tag('office', kind)}")
    if body is None:
        out.refuse(f"malformed OpenDocument file: no office:{kind} body")
    return body


def _inline(element: ET.Element) -> str:
    """An element's text with ``text:s`` spaces, tabs and line breaks spelled out."""
    parts: list[str] = [element.text or ""]
    for child in element:
        if child.tag == _tag("text", "s"):
            parts.append(" " * min(int(child.get(_tag("text", "c"), "1") or 1), 1000))
        elif child.tag == _tag("text", "tab"):
            parts.append("\t")
        elif child.tag == _tag("text", "line-break"):
            parts.append("\n")
        else:
            parts.append(_inline(child))
        parts.append(child.tail or "")
    return "".join(parts)


def _blocks(element: ET.Element, out: TextOut, depth: int = 0) -> None:
    if depth > 50:
        out.refuse("malformed OpenDocument file: nested more than 50 levels deep")
    for child in element:
        if child.tag == _tag("text", "h"):
            level = min(int(child.get(_tag("text", "outline-level"), "1") or 1), 6)
            out.line("#" * level + " " + _inline(child).strip())
        elif child.tag == _tag("text", "p"):
            text = _inline(child).strip()
            if text:
                out.line(text)
        elif child.tag == _tag("text", "list-item"):
            for paragraph in child.iter(_tag("text", "p")):
                out.line("- " + _inline(paragraph).strip())
        elif child.tag == _tag("table", "table-row"):
            cells = [" ".join(_inline(c).split()) for c in child.iter(_tag("table", "table-cell"))]
            if any(cells):
                out.line(" | ".join(cells))
        else:
            _blocks(child, out, depth + 1)


def convert(handle: IO[bytes], out: TextOut) -> None:
    """A text document (.odt)."""
    _blocks(_body(handle, out, "text"), out)


def convert_presentation(handle: IO[bytes], out: TextOut) -> None:
    """A presentation (.odp): each ``draw:page`` is a slide."""
    for number, page in enumerate(_body(handle, out, "presentation").iter(_tag("draw", "page")), start=1):
        out.place("slide", str(number))
        out.line(f"[slide {number}]")
        _blocks(page, out)


def _repeat(element: ET.Element, name: str) -> int:
    try:
        return max(1, min(int(element.get(_tag("table", name), "1") or 1), MAX_REPEAT))
    except ValueError:
        return 1


def _cells(row: ET.Element) -> Iterator[tuple[int, str]]:
    """``(column, text)`` of a row's non-empty cells (repeats of an empty cell only advance the column)."""
    column = 0
    for cell in row:
        if cell.tag not in (_tag("table", "table-cell"), _tag("table", "covered-table-cell")):
            continue
        text = " ".join("\n".join(_inline(p) for p in cell.iter(_tag("text", "p"))).split())
        repeats = _repeat(cell, "number-columns-repeated")
        for offset in range(min(repeats, 1000) if text else 0):
            yield column + offset, text
        column += repeats


def _letters(column: int) -> str:
    letters = ""
    column += 1
    while column:
        column, rest = divmod(column - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def convert_spreadsheet(handle: IO[bytes], out: TextOut) -> None:
    """A spreadsheet (.ods): each sheet, its non-empty rows as ``row N: a | b``, a place per cell."""
    for sheet in _body(handle, out, "spreadsheet").iter(_tag("table", "table")):
        title = sheet.get(_tag("table", "name"), "Sheet")
        name = title if title.replace("_", "").isalnum() else "'" + title.replace("'", "''") + "'"
        out.place("sheet", title)
        out.line(f"[sheet {title}]")
        number = 0
        for row in sheet.iter(_tag("table", "table-row")):
            cells = dict(_cells(row))
            if cells:
                for index, column in enumerate(sorted(cells)):
                    out.write(" | " if index else "")
                    out.place("cell", f"{name}!{_letters(column)}{number + 1}")
                    out.write("" if index else f"row {number + 1}: ")
                    out.write(cells[column])
                out.line()
            number += _repeat(row, "number-rows-repeated")
        out.line()
