"""`rlm doctor`'s check of document conversion: is the ``[documents]`` extra installed, and does a document
made here convert behind the sandbox's walls.

The document is written byte by byte by this module (a one-page PDF with pypdfium2 installed, else a
notebook, which needs only the standard library), so the host parses nothing it did not make; it goes
through the same converter, launcher and limits as a document a user hands over, with a cache of its own
(the check always converts).
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

from rlm_adapters.documents import FORMATS, ConversionCache, DocumentLimits, Format, convert_fd, library_paths

MARKER = "rlm doctor converted this page"
CHECK_SECONDS = 30.0


def tiny_pdf(text: str = MARKER) -> bytes:
    """A valid one-page PDF showing `text` (ASCII letters and spaces), its cross-reference table exact."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("ascii")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    table = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, table)
    return bytes(out)


def tiny_notebook(text: str = MARKER) -> bytes:
    """A one-cell notebook whose markdown cell holds `text`."""
    cell = {"cell_type": "markdown", "metadata": {}, "source": [text]}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def missing_libraries() -> dict[str, str]:
    """Each format whose libraries are not installed (``PDF``), with the error naming the extra."""
    missing: dict[str, str] = {}
    for fmt in FORMATS.values():
        found = library_paths(fmt)
        if isinstance(found, str):
            missing.setdefault(fmt.name.upper(), found)
    return missing


def encodings_line() -> str:
    """What the doctor says of compressed files and text that is not UTF-8 (charset-normalizer located, never
    imported: the host runs no encoding detector)."""
    read = "            .gz, .bz2, .xz files and text that is not UTF-8 are read behind the walls too"
    if importlib.util.find_spec("charset_normalizer") is None:
        return (
            f"{read}, but charset-normalizer is not installed: text in an encoding other than UTF-8, UTF-16 or "
            "Latin code pages is read as UTF-8 with U+FFFD (pip install charset-normalizer)"
        )
    return f"{read} (their encoding detected with charset-normalizer)"


def convert_sample(fmt: Format, data: bytes, limits: DocumentLimits) -> str | None:
    """Convert `data` as `fmt` behind the walls; None when its text came back, else why not."""
    with tempfile.TemporaryDirectory(prefix="rlm-doctor-") as folder:
        path = Path(folder) / f"sample.{fmt.name}"
        path.write_bytes(data)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            outcome = convert_fd(fd, fmt, limits, cache=ConversionCache())
        finally:
            os.close(fd)
    if outcome.converted is None:
        return outcome.reason or "no text came back"
    if MARKER not in outcome.converted.text:
        return f"the converter answered, but without the text the document holds ({MARKER!r})"
    return None


def documents_lines(limits: DocumentLimits | None = None) -> tuple[list[str], bool]:
    """The doctor's lines on document conversion, and whether the conversion it tried worked."""
    limits = limits or DocumentLimits(seconds=CHECK_SECONDS, parallel=1)
    missing = missing_libraries()
    lines = []
    if not missing:
        lines.append("documents   the [documents] extra is installed: PDF, Word, PowerPoint, Excel and RTF are read")
    else:
        names = ", ".join(sorted(missing))
        lines.append(
            f'documents   {names} files are skipped: pip install "rlm-adapters[documents]" to read them '
            "(HTML, EPUB, OpenDocument and notebooks need only the standard library)"
        )
        lines.append(f"            {next(iter(missing.values()))}")
    lines.append(encodings_line())
    pdf = "PDF" not in missing
    fmt, data, what = (
        (FORMATS[".pdf"], tiny_pdf(), "a PDF") if pdf else (FORMATS[".ipynb"], tiny_notebook(), "a notebook")
    )
    started = time.monotonic()
    problem = convert_sample(fmt, data, limits)
    seconds = time.monotonic() - started
    if problem is None:
        lines.append(f"            converter works: {what} made here was converted behind the walls ({seconds:.1f} s)")
    else:
        lines.append(f"            converter FAILED on {what} made here: {problem}")
    return lines, problem is None
