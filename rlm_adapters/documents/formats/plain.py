"""Plain text that is not UTF-8, or that came compressed: its encoding found, its text decoded, behind the walls.

The host reads a text file itself only while it is valid UTF-8; any other text file, and every compressed
one (decompressed first by the converter), is decoded here, where a detector's bugs reach nothing:

1. a byte-order mark says UTF-32, UTF-16 or UTF-8 (binary data that happens to start with one reads as
   control characters: refused);
2. a tar archive, or NUL bytes in the first 8 KiB with no mark, is binary: refused;
3. valid UTF-8 is UTF-8;
4. UTF-8 with a few damaged bytes (most of its other bytes are well-formed UTF-8 sequences, which another
   encoding's text almost never is) stays UTF-8, the damaged bytes replaced;
5. text whose other bytes stand alone or in pairs between ASCII (accents in Latin-script words; CJK and
   Cyrillic or Greek text make longer runs) is in a Latin code page: Windows-1252, Windows-1250 and
   Windows-1257 are compared by what each decoding puts between two letters: a symbol (``Za¿ó³æ``) means
   the wrong code page, and a tie goes to Windows-1252, the most common one (a superset of Latin-1's
   letters). charset-normalizer's ranking of these code pages is noise (French text in cp1252 comes back
   as mac_latin2, ``naïve`` as ``naďve``; a short German line as Urdu), so it is not asked;
6. anything else goes to charset-normalizer (Shift-JIS, GB18030, EUC-KR, Windows-1251...); no encoding
   fitting is binary: refused. A Latin code page it guesses is compared as above.

The encoding used is said in the document's notes whenever it is not UTF-8. Turkish text in Windows-1254
reads as Windows-1252 (``ğ`` as ``ð``): both decode its bytes to letters, and nothing short of a language
model tells them apart.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

SNIFF_BYTES = 8192
# Code points a byte of UTF-32 text can need at most: no longer input can fit the text cap.
BYTES_PER_CHARACTER = 4
# Share of the non-ASCII bytes that must be well-formed UTF-8 sequences for damaged text to stay UTF-8.
UTF8_SHARE = 0.5
LATIN_SHARE = 0.5
# Mean length of the runs of non-ASCII bytes (the first `SAMPLE_RUNS`) at or below which text is taken to be in
# a Latin code page.
LATIN_RUN = 2.0
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32"),
    (b"\x00\x00\xfe\xff", "utf-32-be", "UTF-32"),
    (b"\xef\xbb\xbf", "utf-8", "UTF-8"),
    (b"\xff\xfe", "utf-16-le", "UTF-16"),
    (b"\xfe\xff", "utf-16-be", "UTF-16"),
)
# C0 controls that no text holds (tab, newlines, form feed and ESC are text), and how many a text's start may have.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
CONTROLS_IN_TEXT = 8
_ASCII = bytes(range(128))
# Runs of non-ASCII bytes a code page is judged on (with the byte either side): plenty to tell, fast however long.
SAMPLE_RUNS = 20_000
_NON_ASCII_RUN = re.compile(rb"[\x80-\xff]+")
# A symbol that is not ASCII between two letters: what the wrong single-byte code page makes of a letter.
_ODD = re.compile(r"(?<=[^\W\d_])[^\w\s\x00-\x7f](?=[^\W\d_])")
LATIN_CODE_PAGES = ("cp1252", "cp1250", "cp1257")
_NAMES = {"cp932": "Shift_JIS (cp932)", "latin_1": "Latin-1"}
TAR = "a tar archive is not read; unpack it (tar -xf) and pass the folder"


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write the text of `handle`, decoded; note the encoding when it is not UTF-8."""
    cap = BYTES_PER_CHARACTER * (out.max_bytes + 1)
    data = handle.read(cap + 1)
    if len(data) > cap:
        out.refuse(f"its text is over the cap of {out.max_bytes:,} bytes per document")
    text, note = decoded(data, out)
    if note is not None:
        out.note(note)
    out.write(text)


def decoded(data: bytes, out: TextOut) -> tuple[str, str | None]:
    """The text of `data` and, when it is not plain UTF-8, a note on how it was read.

    Raises:
        Refused: (through ``out.refuse``) it is binary data, not text.
    """
    for bom, codec, name in _BOMS:
        if data.startswith(bom):
            text = data[len(bom) :].decode(codec, "replace")
            if len(_CONTROL.findall(text, 0, SNIFF_BYTES)) > CONTROLS_IN_TEXT:  # two bytes that only look like a mark
                out.refuse(f"binary data, not text (it starts like {name} but holds control characters no text has)")
            return text, None if codec == "utf-8" else f"not UTF-8: read as {name} (its byte-order mark says so)"
    if data[257:262] == b"ustar":
        out.refuse(TAR)
    if b"\x00" in data[:SNIFF_BYTES]:
        out.refuse("binary data, not text (it holds NUL bytes)")
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        pass
    utf8 = data.decode("utf-8", "replace")
    high = data.translate(None, _ASCII)  # the non-ASCII bytes alone
    damaged = utf8.count("\ufffd") - high.count(b"\xef\xbf\xbd")
    if len(high) - damaged >= UTF8_SHARE * len(high):  # most of them in well-formed sequences
        return utf8, f"not valid UTF-8: read as UTF-8 with {damaged:,} damaged byte sequences replaced by U+FFFD"
    del utf8
    seen = _seen(data, high)
    latin = _latin_code_page(seen) if seen.run_bytes <= LATIN_RUN * seen.runs else None
    if latin is not None:
        return data.decode(latin), f"not UTF-8: read as {_name(latin)} (its accented letters say so)"
    try:
        from charset_normalizer import from_bytes
    except ImportError:
        return (
            data.decode("utf-8", "replace"),
            "not UTF-8, and charset-normalizer is not installed to tell its encoding: read as UTF-8 with U+FFFD",
        )
    best = from_bytes(data).best()
    if best is None:
        out.refuse("binary data, not text (no text encoding fits it)")
    encoding = best.encoding
    if _single_byte_latin(seen, encoding):
        encoding = _latin_code_page(seen) or encoding
    return data.decode(encoding, "replace"), f"not UTF-8: read as {_name(encoding)} (detected by charset-normalizer)"


@dataclass(frozen=True)
class Seen:
    """What a code page is judged on, taken once from the whole text.

    Attributes:
        distinct: Each non-ASCII byte value the text holds, once (a code page must define them all).
        neighbourhoods: The first runs of non-ASCII bytes with the byte either side, one per line (a single-byte
            code page reads them as it would read them in place).

        runs: How many runs of non-ASCII bytes the neighbourhoods hold.
        run_bytes: How many bytes those runs hold.
    """

    distinct: bytes
    neighbourhoods: bytes
    runs: int
    run_bytes: int


def _seen(data: bytes, high: bytes) -> Seen:
    """What the code pages are judged on in `data` (`high`: its non-ASCII bytes)."""
    pieces = []
    run_bytes = 0
    for found in itertools.islice(_NON_ASCII_RUN.finditer(data), SAMPLE_RUNS):
        start, end = found.span()
        run_bytes += end - start
        pieces.append(data[max(start - 1, 0) : end + 1])
    return Seen(bytes(sorted(set(high))), b"\n".join(pieces), len(pieces), run_bytes)


def _single_byte_latin(seen: Seen, codec: str) -> bool:
    """Whether `codec` is a single-byte code page that reads the text as mostly Latin letters."""
    try:
        if len(seen.distinct.decode(codec)) != len(seen.distinct):
            return False
        return _mostly_latin(seen.neighbourhoods.decode(codec))
    except (UnicodeDecodeError, LookupError):
        return False


def _latin_code_page(seen: Seen) -> str | None:
    """The Windows code page of Latin letters that reads the text best, or None when none reads it as mostly Latin
    letters."""
    scores = []
    for rank, codec in enumerate(LATIN_CODE_PAGES):
        try:
            seen.distinct.decode(codec)
        except UnicodeDecodeError:  # a byte this code page leaves undefined
            continue
        candidate = seen.neighbourhoods.decode(codec)
        if _mostly_latin(candidate):
            scores.append((len(_ODD.findall(candidate)), rank, codec))
    return min(scores)[2] if scores else None


def _mostly_latin(text: str) -> bool:
    """Whether most of the non-ASCII letters of `text` are Latin letters."""
    letters = [c for c in text if c > "\x7f" and c.isalpha()]
    latin = sum("LATIN" in unicodedata.name(c, "") for c in letters)
    return bool(letters) and latin >= LATIN_SHARE * len(letters)


def _name(codec: str) -> str:
    """How people call a codec: ``Windows-1252`` for ``cp1252``."""
    if re.fullmatch(r"cp125\d", codec):
        return f"Windows-{codec[2:]}"
    return _NAMES.get(codec, codec)
