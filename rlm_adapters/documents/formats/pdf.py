"""PDF, with PDFium (pypdfium2): one place per page (``[page 7]`` heads each page's text); locked files are refused.

PDFium was chosen by measurement (`benchmarks/documents_bench.py`, real LaTeX, DocBook and Sphinx manuals
against poppler's ``pdftotext``): it keeps the spaces between words where pypdf glues them together (5.7%
of debmake-doc's words run together with pypdf, 0.04% with PDFium and pdftotext), keeps a table's rows
on one line, and reads about as fast as pdftotext (ten times pypdf, thirty times pdfminer.six).

A page whose printed label differs from its number (roman front matter: the printed page 79 is page 88)
is headed ``[page 88 (79)]`` and its label is sent beside the places (`TextOut.page_label`).
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

import pypdfium2 as pdfium

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

# PDFium marks a word broken at a line's end with U+FFFE (its hyphen is not part of the word); TeX's
# ligatures come through as their presentation forms, which no search for "file" or "office" would match.
_LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                            "\ufb05": "st", "\ufb06": "st", "\ufffe": None, "\x00": None})  # fmt: skip
_PASSWORD_ERROR = 4  # FPDF_ERR_PASSWORD


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write each page's text, headed ``[page N]`` (N counts pages from 1, as a viewer's index does)."""
    try:
        document = pdfium.PdfDocument(handle)
    except pdfium.PdfiumError as exc:
        if exc.err_code == _PASSWORD_ERROR:
            out.refuse("encrypted: it needs a password to open")
        out.refuse(f"malformed PDF: {exc}")
    try:
        count = len(document)
        blank = unreadable = 0
        for number in range(1, count + 1):
            label = _label(document, number - 1)
            shown = str(number) if label in ("", str(number)) else f"{number} ({label})"
            out.place("page", str(number))
            if label:
                out.page_label(number, label)
            out.line(f"[page {shown}]")
            try:
                text = _page_text(document, number - 1)
            except pdfium.PdfiumError as exc:
                unreadable += 1
                out.cut(f"page {number} could not be read ({exc})")
                continue
            blank += not text
            out.line(text)
        if count and unreadable == count:
            out.refuse(f"malformed PDF: none of its {count:,} pages could be read")
        if count and blank + unreadable == count:
            out.note("no text layer (a scanned document?): nothing to read without OCR")
    finally:
        document.close()


def _page_text(document: pdfium.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            raw = str(textpage.get_text_range())
        finally:
            textpage.close()
    finally:
        page.close()
    text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\ufffe\n", "")
    return text.translate(_LIGATURES).rstrip()


def _label(document: pdfium.PdfDocument, index: int) -> str:
    """The page's own label (``xii``, ``A-3``), or "" when the PDF gives none."""
    try:
        label = document.get_page_label(index)
    except (pdfium.PdfiumError, UnicodeDecodeError, ValueError):
        return ""
    return " ".join(str(label).split())[:40]
