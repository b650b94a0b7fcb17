"""Word (.docx), with python-docx: paragraphs and tables in body order, headings as ``#``.

Pages: a .docx stores no pages, but Word records where its own layout broke them when it saved
(``w:lastRenderedPageBreak``), and hard page breaks are in the text. When the file has either, each
paragraph that starts a page starts a place (``page N``), so citations can name the page; a file
without them (most generated ones) is cited by line.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

import docx
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

_BREAK = qn("w:br")
_RENDERED = qn("w:lastRenderedPageBreak")
_TEXT = qn("w:t")
_TYPE = qn("w:type")


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write the document's paragraphs and tables, one line each (a table row per line)."""
    out.open_zip(handle).close()
    handle.seek(0)
    document = docx.Document(handle)
    body = document.element.body
    paged = any(_is_page_break(node) for node in body.iter(_BREAK, _RENDERED))
    page = 1
    if paged:
        out.place("page", "1")
    for element in body.iterchildren():
        if element.tag == qn("w:p"):
            before, after = _breaks(element) if paged else (False, 0)
            if before:
                page += 1
                out.place("page", str(page))
            _paragraph(Paragraph(element, document), out)
            for _ in range(after):
                page += 1
                out.place("page", str(page))
        elif element.tag == qn("w:tbl"):
            _table(Table(element, document), out)


def _is_page_break(node: Any) -> bool:
    return bool(node.tag == _RENDERED or node.get(_TYPE) == "page")


def _breaks(paragraph: Any) -> tuple[bool, int]:
    """Whether the paragraph starts on a new page, and how many pages start after it."""
    seen_text = False
    starts = False
    after = 0
    for node in paragraph.iter(_BREAK, _RENDERED, _TEXT):
        if node.tag == _TEXT:
            seen_text = seen_text or bool(node.text)
        elif _is_page_break(node):
            if not seen_text and not starts:
                starts = True
            else:
                after += 1
    return starts, after


def _paragraph(paragraph: Paragraph, out: TextOut) -> None:
    text = paragraph.text.strip()
    if not text:
        return
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if style == "Title":
        out.line(f"# {text}")
    elif style.startswith("Heading ") and style[8:].isdigit():
        out.line("#" * min(int(style[8:]), 6) + f" {text}")
    elif style.startswith("List"):
        out.line(f"- {text}")
    else:
        out.line(text)


def _table(table: Table, out: TextOut) -> None:
    for row in table.rows:
        cells = [" ".join(cell.text.split()) for cell in row.cells]
        if any(cells):
            out.line(" | ".join(cells))
    out.line()
