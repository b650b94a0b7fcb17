"""documents/_binary.py: a file's raw bytes decoded as text are told from text (issue 36: a PDF read by
`SimpleDirectoryReader` without its PDF reader reached the model as "%PDF-1.5...")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rlm_adapters.documents import binary_kind
from tests.documents import writers

REAL = Path("/opt/rlm-real-documents")
WRITERS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "report.pdf": (writers.pdf, "a PDF file"),
    "memo.docx": (writers.docx, "a ZIP archive"),
    "deck.pptx": (writers.pptx, "a ZIP archive"),
    "book.xlsx": (writers.xlsx, "a ZIP archive"),
    "program.pdf": (writers.elf_named_pdf, "an executable (ELF)"),
}


@pytest.mark.parametrize("errors", ["ignore", "replace", "surrogateescape"])
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_documents_decoded_as_text_are_named(tmp_path: Path, name: str, errors: str) -> None:
    write, kind = WRITERS[name]
    write(tmp_path / name)
    text = (tmp_path / name).read_bytes().decode("utf-8", errors=errors)
    found = binary_kind(text)
    assert found is not None and found.startswith(kind)


@pytest.mark.parametrize("errors", ["ignore", "replace"])
def test_real_binary_files_are_named(errors: str) -> None:
    real = [p for p in REAL.rglob("*") if p.suffix in {".pdf", ".xlsx", ".docx", ".pptx", ".png", ".gz"}][:40]
    if len(real) < 5:
        pytest.skip("needs the real documents installed under /opt/rlm-real-documents")
    unnamed = [p for p in real if binary_kind(p.read_bytes()[:8192].decode("utf-8", errors=errors)) is None]
    assert unnamed == []


@pytest.mark.parametrize(
    "data",
    [
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100,  # a legacy .doc
        b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR",
        b"GIF89a\x01\x00",
        bytes(range(256)) * 4,
    ],
)
def test_other_binary_signatures(data: bytes) -> None:
    assert binary_kind(data.decode("utf-8", errors="ignore")) is not None
    assert binary_kind(data.decode("latin-1")) is not None


TEXTS = [
    "%PDF-1.5 is the version line every PDF starts with; this note explains the header.\n" * 20,
    "PK is our team's shorthand for primary key.\n",
    "\x1b[31mERROR\x1b[0m disk full\n\x1b[32mOK\x1b[0m retried\n" * 50,  # a log with colours
    "a\tb\tc\n1\t2\t3\n\f next page\r\n",
    "naïve café 日本語 🙂 " * 300,
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_text_is_not_mistaken_for_bytes(text: str) -> None:
    assert binary_kind(text) is None


def test_real_text_files_are_text() -> None:
    texts = [p for p in REAL.rglob("*") if p.suffix in {".html", ".txt", ".R", ".md", ".csv"} and p.is_file()][:200]
    if len(texts) < 5:
        pytest.skip("needs the real documents installed under /opt/rlm-real-documents")
    assert [p for p in texts if binary_kind(p.read_text(encoding="utf-8", errors="replace")) is not None] == []
