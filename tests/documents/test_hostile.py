"""Hostile documents: each is skipped with a reason within its limits, the host's memory stays small, and
the documents beside them are still answered."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlm_adapters.documents import DocumentLimits
from rlm_adapters.files import load_paths
from tests.documents import writers

SECONDS = 20.0  # each document's time limit in these tests
HOST_PEAK_BYTES = 200 * 1024**2  # the loading process's own peak RSS, converting 500 MB of hostile files


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    writers.zip_bomb_docx(folder / "bomb.docx")
    writers.billion_laughs_docx(folder / "laughs.docx")
    writers.lying_zip_bomb_docx(folder / "lying.docx")
    writers.billion_laughs_xlsx(folder / "laughs.xlsx")
    writers.deeply_nested_pdf(folder / "deep.pdf")
    writers.million_objects_pdf(folder / "million.pdf")
    writers.looping_pdf(folder / "loop.pdf")
    writers.pdf(folder / "locked.pdf", password="secret")
    writers.elf_named_pdf(folder / "elf.pdf")
    writers.huge_output_notebook(folder / "huge.ipynb")
    writers.pdf(folder / "report.pdf")
    writers.xlsx(folder / "book.xlsx")
    return folder


REASONS = {
    "bomb.docx": "a zip bomb: ",
    # The XML parsers' own guards: libxml2's under python-docx; under openpyxl, defusedxml's refusal of
    # entities where it is installed beside openpyxl (as `pip install ".[all]"` puts it), else expat's.
    "laughs.docx": "malformed or unsupported: XMLSyntaxError: ",
    "laughs.xlsx": "malformed or unsupported: ",
    "million.pdf": "",  # PDFium's own refusal, or the time limit: either way a reason
    "loop.pdf": "malformed PDF: none of its 2 pages could be read",
    "locked.pdf": "encrypted: it needs a password to open",
    "elf.pdf": "not a PDF file: it should start with '%PDF-' but begins with b'\\x7fELF",
    "huge.ipynb": "a 200 MiB IPYNB file, over the cap of 100 MiB for one document (max_document_bytes)",
}


@pytest.mark.slow
def test_each_hostile_document_is_skipped_with_its_reason_and_the_others_answered(hostile: Path) -> None:
    started = time.monotonic()
    loaded = load_paths([str(hostile)], [hostile], documents=DocumentLimits(seconds=SECONDS))
    took = time.monotonic() - started
    skipped = {s.path: s.reason for s in loaded.skipped}
    assert set(skipped) == set(REASONS)
    for name, words in REASONS.items():
        assert skipped[name].startswith(words), (name, skipped[name])
    assert skipped["million.pdf"]  # a reason, whichever limit it met
    assert "amplification" in skipped["laughs.docx"]
    assert skipped["laughs.xlsx"].startswith(
        (
            "malformed or unsupported: EntitiesForbidden: ",
            "malformed or unsupported: ParseError: limit on input amplification",
        )
    ), skipped["laughs.xlsx"]
    # The bomb whose headers hide its size is read only as far as they say: its text, not its 600 MB.
    assert {f.path for f in loaded.files} == {"report.pdf", "book.xlsx", "lying.docx", "deep.pdf"}
    # PDFium reads past the million nested arrays to an empty page, and says there is nothing to read.
    deep = next(f for f in loaded.files if f.path == "deep.pdf")
    assert deep.text.strip() == "[page 1]" and "no text layer" in deep.metadata["notes"][0]
    assert "8812-BRAVO" in next(f.text for f in loaded.files if f.path == "report.pdf")
    assert next(f.text for f in loaded.files if f.path == "lying.docx").startswith("# Service agreement\n")
    # Two cores, six hostile files: within the time limits of the documents the slowest core ran.
    assert took < SECONDS * 3


def test_a_pdf_slow_to_read_meets_its_time_limit_and_the_others_are_answered(tmp_path: Path) -> None:
    """Where the library has no guard (a 20 KB PDF that takes minutes to extract), the time limit stops it."""
    writers.slow_pdf(tmp_path / "slow.pdf")
    writers.pdf(tmp_path / "report.pdf")
    started = time.monotonic()
    loaded = load_paths([str(tmp_path)], [tmp_path], documents=DocumentLimits(seconds=2.0))
    took = time.monotonic() - started
    assert [(s.path, s.reason) for s in loaded.skipped] == [
        ("slow.pdf", "converting it took longer than its time limit of 2 s")
    ]
    assert [f.path for f in loaded.files] == ["report.pdf"]
    assert took < 2.0 + 8.0  # the limit, and room for a loaded machine to start and kill one converter


@pytest.mark.slow
def test_the_huge_notebook_within_the_raw_cap_meets_the_memory_limit(hostile: Path) -> None:
    limits = DocumentLimits(seconds=SECONDS, max_document_bytes=300 * 1024**2, memory_bytes=256 * 1024**2)
    loaded = load_paths([str(hostile / "huge.ipynb"), str(hostile / "report.pdf")], [hostile], documents=limits)
    assert [(s.path, s.reason) for s in loaded.skipped] == [
        ("huge.ipynb", "converting it needed more than its memory limit of 256 MiB")
    ]
    assert [f.path for f in loaded.files] == ["report.pdf"]


def test_with_room_the_huge_output_is_cut_and_the_notebook_read(hostile: Path) -> None:
    limits = DocumentLimits(seconds=SECONDS, max_document_bytes=300 * 1024**2)
    (loaded,) = load_paths([str(hostile / "huge.ipynb")], [hostile], documents=limits).files
    assert loaded.size < 64 * 1024 and "more characters of output cut]" in loaded.text
    assert loaded.metadata["notes"] == ["outputs over 20,000 characters were cut"]


@pytest.mark.slow
def test_the_host_never_holds_a_document_whole(hostile: Path) -> None:
    """The host copies each document in 1 MiB pieces and parses none: its peak RSS stays far below the files'."""
    # VmHWM is the peak of this process's own memory since its exec (ru_maxrss would carry pytest's over).
    script = (
        "import json, sys\n"
        "from rlm_adapters.documents import DocumentLimits\n"
        "from rlm_adapters.files import load_paths\n"
        "limits = DocumentLimits(seconds=20.0, max_document_bytes=300 * 1024**2)\n"
        "loaded = load_paths([sys.argv[1]], [sys.argv[1]], documents=limits)\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
        "print(json.dumps({'peak': int(status) * 1024, 'files': sorted(f.path for f in loaded.files)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(hostile)], capture_output=True, text=True, timeout=180, check=True
    )
    report = json.loads(done.stdout)
    raw = sum(p.stat().st_size for p in hostile.iterdir())
    assert raw > 300 * 1024**2  # what the host had to get through
    assert report["files"] == ["book.xlsx", "deep.pdf", "huge.ipynb", "lying.docx", "report.pdf"]
    assert report["peak"] < HOST_PEAK_BYTES, report
