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
            raw = _join_raised(textpage, str(textpage.get_text_range()))
        finally:
            textpage.close()
    finally:
        page.close()
    text = raw.replace("\r\n", "\n").replace("\r", "\n").replace("\ufffe\n", "")
    return text.translate(_LIGATURES).rstrip()


def _join_raised(textpage: pdfium.PdfTextPage, raw: str) -> str:
    """`raw` with the line breaks PDFium puts around a superscript or a subscript taken out.

    PDFium starts a new line whenever the baseline moves, so a table row ``asinh(x)  any  sinh⁻¹ x (inverse
    hyperbolic sine)`` came out on three lines. A break is kept unless the characters on its two sides stand
    side by side: their (font-high) boxes overlap by a third of the smaller's height, and the second starts
    at the first's end, less than two heights to its right (no space between them only where they touch). A
    real line break goes down and back to the left.
    """
    if "\r\n" not in raw or len(raw) != textpage.count_chars():  # a character outside the BMP: keep PDFium's
        return raw
    parts: list[str] = []
    done = 0
    at = raw.find("\r\n")
    while at >= 0:
        if 0 < at < len(raw) - 2 and raw[at - 1] not in "\ufffe\n" and raw[at + 2] not in "\r\n":
            _, bottom, right, top = textpage.get_charbox(at - 1, loose=True)
            left2, bottom2, _, top2 = textpage.get_charbox(at + 2, loose=True)
            height = min(top - bottom, top2 - bottom2)
            overlap = min(top, top2) - max(bottom, bottom2)
            gap = left2 - right
            if height > 0 and overlap > height / 3 and -height / 4 <= gap < 2 * max(top - bottom, top2 - bottom2):
                parts.append(raw[done:at])
                parts.append("" if gap < height / 20 else " ")  # glyphs that touch: one word (e^x is "ex")
                done = at + 2
        at = raw.find("\r\n", at + 2)
    parts.append(raw[done:])
    return "".join(parts)


def _label(document: pdfium.PdfDocument, index: int) -> str:
    """The page's own label (``xii``, ``A-3``), or "" when the PDF gives none."""
    try:
        label = document.get_page_label(index)
    except (pdfium.PdfiumError, UnicodeDecodeError, ValueError):
        return ""
    return " ".join(str(label).split())[:40]
