"""Whether a "text" is really a file's raw bytes: a PDF, an Office file or another binary decoded as if it were text.

LlamaIndex's `SimpleDirectoryReader` without ``llama-index-readers-file`` gives a PDF's document the text
``"%PDF-1.5 ..."``, and an .xlsx's ``"PK\\x03\\x04 ..."``, silently; a model would then read bytes. This looks
at the first few KiB only (a signature, or control characters no text has) and names what the bytes are, so an
entry point can say so and point to a way that converts them (`from_paths`, ``paths=``).
"""

from __future__ import annotations

import re

SNIFF_CHARS = 4096
# What a decoder that drops or keeps undecodable bytes leaves of each signature (\x89 and \xff vanish).
_SIGNATURES = (
    ("PK\x03\x04", "a ZIP archive (a .docx, .xlsx, .pptx, .epub or .odt is one)"),
    ("PK\x05\x06", "a ZIP archive (a .docx, .xlsx, .pptx, .epub or .odt is one)"),
    ("\x7fELF", "an executable (ELF)"),
    ("PNG\r\n\x1a\n", "a PNG image"),
    ("\ufffdPNG\r\n\x1a\n", "a PNG image"),
    ("GIF87a", "a GIF image"),
    ("GIF89a", "a GIF image"),
)
# A PDF's header may follow some junk, and plain text may well start with "%PDF-": its objects tell.
_PDF = re.compile(r"%PDF-\d")
_PDF_BODY = re.compile(r"\d+ \d+ obj\b|\bendobj\b|\bstream\r?\n|/Type\s*/")
# C0 controls that no text holds (tab, newlines, form feed and ESC, which logs use for colours, are text).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
CONTROL_SHARE = 0.01


def binary_kind(text: str) -> str | None:
    """What `text` is when it is a binary file's bytes decoded as text (``"a PDF file"``), else None."""
    head = text[:SNIFF_CHARS]
    for signature, kind in _SIGNATURES:
        if head.startswith(signature):
            return kind
    pdf = _PDF.search(head, 0, 1024 + 8)
    if pdf is not None and _PDF_BODY.search(head, pdf.end()):
        return "a PDF file"
    if head.startswith(("\u03cf\x11", "\ufffd\ufffd\x11\ufffd")):  # OLE2 (D0 CF 11 E0), decoded either way
        return "a legacy Office file (.doc, .xls, .ppt)"
    if "\x00" in head:
        return "binary data (it holds NUL characters)"
    controls = len(_CONTROL.findall(head))
    if controls >= 8 and controls / len(head) >= CONTROL_SHARE:
        return "binary data (it holds control characters no text has)"
    return None


def head_of(text: str, chars: int = 12) -> str:
    """The first characters of `text`, quoted as Python would (so bytes show as escapes)."""
    return repr(text[:chars])
