"""RTF, with striprtf: the document's text (RTF has no pages of its own; it is cited by line)."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

from striprtf.striprtf import rtf_to_text

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut


def convert(handle: IO[bytes], out: TextOut) -> None:
    """The text of the RTF in `handle` (its ``\\ansicpg`` escapes read as Windows-1252)."""
    source = handle.read().decode("latin-1")
    if not source.lstrip().startswith("{\\rtf"):
        out.refuse("malformed RTF: it does not start with {\\rtf")
    out.write(rtf_to_text(source, encoding="cp1252", errors="replace"))
