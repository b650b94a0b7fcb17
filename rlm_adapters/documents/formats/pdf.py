"""PDF, with pypdf: one place per page (``[page 7]`` heads each page's text); encrypted files are refused."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

import pypdf
from pypdf.errors import PdfReadError

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write each page's text, headed ``[page N]`` (N counts pages from 1, as a viewer shows them)."""
    try:
        reader = pypdf.PdfReader(handle, strict=False)
        if reader.is_encrypted and not _opens_without_password(reader):
            out.refuse("encrypted: it needs a password to open")
        pages = reader.pages
        count = len(pages)
    except PdfReadError as exc:
        out.refuse(f"malformed PDF: {exc}")
    blank = 0
    for number in range(1, count + 1):
        try:
            text = (pages[number - 1].extract_text() or "").rstrip()
        except PdfReadError as exc:
            text = ""
            out.note(f"page {number} could not be read ({exc})")
        blank += not text
        out.place("page", str(number))
        out.line(f"[page {number}]")
        out.line(text)
    if count and blank == count:
        out.note("no text layer (a scanned document?): nothing to read without OCR")


def _opens_without_password(reader: pypdf.PdfReader) -> bool:
    """Whether an encrypted PDF opens with the empty user password (permissions only, no secret)."""
    try:
        return bool(reader.decrypt(""))
    except Exception:  # an encryption the installed crypto cannot read counts as locked
        return False
