"""The text a converter builds, with its places, and the guards every format shares. Standard library only.

Loaded by path inside the converter's sandbox (`rlm_adapters/core/sandbox/programs/converter.py`), and
imported as a module on the host only by tests and the benchmark's unsandboxed arm: it imports nothing of
this package.

`TextOut` collects the converted text and its places (``[offset, kind, label]`` in text order: where a
page, slide, sheet or cell starts; each runs until the next), under a cap on characters and on places.
`open_zip` refuses an archive whose members would expand past a cap (a zip bomb) before any library reads
it; `decompress` reads a gzip, bzip2 or xz file into memory under a cap on its size and on its ratio (a
decompression bomb is stopped as it passes either). `html_text` turns HTML into text with headings, list
items, table rows and paragraphs on their own lines. A format module reaches all of it through the
`TextOut` it is handed (``out.refuse``, ``out.open_zip``, ``out.html``), so it needs no import of this
module at run time.
"""

from __future__ import annotations

import bz2
import gzip
import html.parser
import io
import lzma
import re
import zipfile
from collections.abc import Callable
from typing import IO, Any, NoReturn

MAX_ZIP_MEMBERS = 20_000
DECOMPRESS_CHUNK = 1 << 20
# Below this much output, no ratio is held against a file: a small file of repeated lines may compress
# very well and harms nothing.
RATIO_GRACE_BYTES = 1 << 20
_OPENERS: dict[str, Callable[[IO[bytes]], io.BufferedIOBase]] = {
    "gzip": lambda handle: gzip.GzipFile(fileobj=handle),
    "bzip2": bz2.BZ2File,
    "xz": lzma.LZMAFile,
}
SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "head", "svg", "math"})
BLOCK_TAGS = frozenset(
    {"p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "blockquote", "pre", "ul",
     "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "form", "figure", "figcaption", "hr",
     "address", "body", "html", "title"}
)  # fmt: skip
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")


class Refused(Exception):
    """The document cannot be converted, for a reason that is the document's (encrypted, too large)."""


class TextOut:
    """Converted text under a cap, with the places where each page, slide, sheet or cell begins.

    Args:
        max_bytes: Cap on the text (UTF-8 bytes; counted as characters while writing, checked exactly at the end).
        max_places: Cap on the places recorded.
        expanded_bytes: Cap on what an archive's members may expand to (`open_zip`), and on one member; on what
            a compressed file may expand to (`decompress`).
        expansion_ratio: Cap on how many times its own size a compressed file may expand to (`decompress`).
    """

    def __init__(self, max_bytes: int, max_places: int, expanded_bytes: int, expansion_ratio: int = 200) -> None:
        self.max_bytes = max_bytes
        self.max_places = max_places
        self.expanded_bytes = expanded_bytes
        self.expansion_ratio = expansion_ratio
        self.places: list[list[Any]] = []
        self.notes: list[str] = []
        self.page_labels: list[list[Any]] = []
        self._parts: list[str] = []
        self._length = 0

    @property
    def offset(self) -> int:
        """Characters written so far (where the next place would start)."""
        return self._length

    def place(self, kind: str, label: str) -> None:
        """Start a place here (``page``/``slide``/``sheet``/``cell`` and its label).

        Raises:
            Refused: The document has more places than the cap (a format that can fall back to coarser
                places checks `room` first).
        """
        if self.places and self.places[-1][0] == self._length:
            self.places[-1] = [self._length, kind, label]  # an empty place is replaced by the next one
            return
        if len(self.places) >= self.max_places:
            raise Refused(f"more than {self.max_places:,} pages, slides, sheets or cells")
        self.places.append([self._length, kind, label])

    def room(self) -> int:
        """How many more places the cap allows."""
        return self.max_places - len(self.places)

    def write(self, text: str) -> None:
        """Add `text` (NUL characters dropped).

        Raises:
            Refused: The text passed its cap.
        """
        if "\x00" in text:
            text = text.replace("\x00", "")
        self._length += len(text)
        if self._length > self.max_bytes:
            raise Refused(f"its text is over the cap of {self.max_bytes:,} bytes per document")
        self._parts.append(text)

    def line(self, text: str = "") -> None:
        """Add `text` as one line (its own line breaks kept)."""
        self.write(text + "\n")

    def note(self, text: str) -> None:
        """Say something about the conversion (shown with the document's metadata), once."""
        if text not in self.notes and len(self.notes) < 20:
            self.notes.append(text[:200])

    def cut(self, text: str) -> None:
        """Say that part of the document is missing from the text, in its notes and in the text where it is missing.

        Nothing a converter drops may go unsaid: the notes reach the user (and the document's metadata),
        the ``[cut: ...]`` line reaches a model reading that part.
        """
        self.note(text)
        self.line(f"[cut: {text[:200]}]")

    def page_label(self, number: int, label: str) -> None:
        """Record page `number`'s own label (``xii``, ``79``), as the PDF prints it."""
        if len(self.page_labels) < self.max_places:
            self.page_labels.append([number, label[:40]])

    def refuse(self, reason: str) -> NoReturn:
        """Stop: the document will not be converted, for `reason` (a format module's way to raise `Refused`)."""
        raise Refused(reason)

    def open_zip(self, handle: IO[bytes]) -> zipfile.ZipFile:
        """The archive in `handle`, unless it is a zip bomb (see `open_zip`)."""
        return open_zip(handle, self)

    def html(self, markup: str) -> None:
        """Write the text of HTML `markup` (see `html_text`)."""
        html_text(markup, self)

    def decompress(self, handle: IO[bytes], compression: str) -> io.BytesIO:
        """What a compressed file holds, unless it is a decompression bomb (see `decompress`)."""
        return decompress(handle, compression, self)

    def decode(self, data: bytes) -> str:
        """Bytes of a text format as text (see `decode`)."""
        return decode(data)

    def text(self) -> str:
        """The text so far."""
        return "".join(self._parts)

    def encoded(self) -> bytes:
        """The text as UTF-8 (each character that has no UTF-8 form becomes ``?``: offsets do not move).

        Raises:
            Refused: The encoded text passed its cap.
        """
        data = self.text().encode("utf-8", "replace")
        if len(data) > self.max_bytes:
            raise Refused(f"its text is over the cap of {self.max_bytes:,} bytes per document")
        return data


def open_zip(handle: IO[bytes], out: TextOut) -> zipfile.ZipFile:
    """The archive in `handle`, refused when its members would expand past ``out.expanded_bytes``.

    ``zipfile`` stops each member at the size its header declares, so checking the declared sizes bounds
    what any library reading through it can inflate.

    Raises:
        Refused: Not a zip archive, too many members, or a zip bomb.
    """
    try:
        archive = zipfile.ZipFile(handle)
    except zipfile.BadZipFile as exc:
        raise Refused(f"malformed: not a readable zip archive ({exc})") from None
    members = archive.infolist()
    if len(members) > MAX_ZIP_MEMBERS:
        raise Refused(f"malformed: {len(members):,} archive members (more than {MAX_ZIP_MEMBERS:,})")
    total = sum(member.file_size for member in members)
    if total > out.expanded_bytes:
        packed = sum(member.compress_size for member in members)
        raise Refused(f"a zip bomb: {packed:,} bytes that expand to {total:,} (over the cap of {out.expanded_bytes:,})")
    return archive


def decompress(handle: IO[bytes], compression: str, out: TextOut) -> io.BytesIO:
    """What the `compression` (``gzip``, ``bzip2``, ``xz``) file in `handle` holds, read whole into memory.

    Read a chunk at a time, so a decompression bomb is stopped as soon as it passes ``out.expanded_bytes`` or
    expands more than ``out.expansion_ratio`` times its own size (once past `RATIO_GRACE_BYTES`), before it
    holds more than one chunk over the cap.

    Raises:
        Refused: Past a cap (naming it), or not readable as `compression` data (truncated, corrupt).
    """
    packed = max(handle.seek(0, io.SEEK_END), 1)
    handle.seek(0)
    kept = io.BytesIO()
    size = 0
    try:
        with _OPENERS[compression](handle) as stream:
            while chunk := stream.read(DECOMPRESS_CHUNK):
                size += len(chunk)
                if size > out.expanded_bytes:
                    raise Refused(
                        f"a decompression bomb? its {packed:,} {compression} bytes expand past the cap of "
                        f"{out.expanded_bytes:,} bytes (DocumentLimits.expanded_bytes); raise it in Python, or "
                        "decompress the file yourself"
                    )
                if size > RATIO_GRACE_BYTES and size > packed * out.expansion_ratio:
                    raise Refused(
                        f"a decompression bomb? its {packed:,} {compression} bytes expand past {size:,} bytes, "
                        f"over the cap of {out.expansion_ratio:,} times their size (DocumentLimits.expansion_ratio); "
                        "raise it in Python, or decompress the file yourself"
                    )
                kept.write(chunk)
    except (OSError, EOFError, lzma.LZMAError) as exc:  # gzip.BadGzipFile is an OSError
        raise Refused(f"malformed {compression} data: {exc}") from None
    kept.seek(0)
    return kept


class _HTMLText(html.parser.HTMLParser):
    """HTML to lines: headings as ``#``, list items as ``-``, table cells joined by ``|``."""

    def __init__(self, out: TextOut) -> None:
        super().__init__(convert_charrefs=True)
        self.out = out
        self.skipping = 0
        self.line: list[str] = []
        self.prefix = ""
        self.preformatted = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIPPED_TAGS:
            self.skipping += 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.flush()
            self.prefix = "#" * int(tag[1]) + " "
        elif tag == "li":
            self.flush()
            self.prefix = "- "
        elif tag == "tr":
            self.flush()
        elif tag in ("td", "th") and self.line:
            self.line.append(" | ")
        elif tag == "br":
            self.flush()
        elif tag == "pre":
            self.flush()
            self.preformatted += 1
        elif tag in BLOCK_TAGS:
            self.flush()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("br", "hr"):
            self.flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIPPED_TAGS:
            self.skipping = max(self.skipping - 1, 0)
        elif tag == "pre":
            self.flush()
            self.preformatted = max(self.preformatted - 1, 0)
        elif tag in BLOCK_TAGS or tag in ("h1", "h2", "h3", "h4", "h5", "h6", "li", "tr"):
            self.flush()

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        if self.preformatted:
            self.line.append(data)
        else:
            self.line.append(_SPACES.sub(" ", data.replace("\n", " ")))

    def flush(self) -> None:
        text = "".join(self.line).strip()
        self.line = []
        if text:
            self.out.line(self.prefix + text)
        self.prefix = ""


def html_text(markup: str, out: TextOut) -> None:
    """Write the text of `markup` to `out`, one block per line."""
    parser = _HTMLText(out)
    parser.feed(markup)
    parser.close()
    parser.flush()


def decode(data: bytes) -> str:
    """Bytes of a text format as text: a BOM or a declared charset if there is one, else UTF-8 with replacement."""
    for bom, encoding in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, "replace")
    declared = re.search(rb"""charset=["']?([A-Za-z0-9_.:-]{1,40})""", data[:4096])
    if declared is not None:
        try:
            return data.decode(declared.group(1).decode("ascii"), "replace")
        except LookupError:
            pass
    return data.decode("utf-8", "replace")
