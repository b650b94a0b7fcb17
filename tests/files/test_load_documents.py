"""files/_documents.py: documents found by a load are converted in parallel, within its cap, time and cancel."""

from __future__ import annotations

import importlib.util
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.sandbox.subprocess.isolation import NoSafeLevel
from rlm_adapters.core.units import human_bytes
from rlm_adapters.documents import CONVERSIONS, ConversionProgress
from rlm_adapters.errors import FileLoadError
from rlm_adapters.files import load_paths
from tests.documents import writers


@pytest.fixture(autouse=True)
def _fresh_conversions() -> None:
    CONVERSIONS.clear()


def test_documents_count_toward_max_bytes_by_their_converted_text(tmp_path: Path) -> None:
    writers.pdf(tmp_path / "a.pdf")
    (tmp_path / "b.txt").write_text("x" * 100)
    (text,) = [f for f in load_paths([str(tmp_path / "a.pdf")], [tmp_path]).files]
    fits = load_paths([str(tmp_path)], [tmp_path], max_bytes=text.size + 100)
    assert fits.total_bytes == text.size + 100
    left = re.escape(human_bytes(text.size - 1))
    with pytest.raises(FileLoadError, match=rf"the documents' text comes to more than {left}, what is left of the cap"):
        load_paths([str(tmp_path)], [tmp_path], max_bytes=text.size + 99)


def test_a_document_over_its_own_size_cap_is_skipped_before_it_is_read(tmp_path: Path) -> None:
    from rlm_adapters.documents import DocumentLimits

    writers.pdf(tmp_path / "a.pdf")
    (tmp_path / "b.txt").write_text("text")
    loaded = load_paths([str(tmp_path)], [tmp_path], documents=DocumentLimits(max_document_bytes=100))
    assert [s.path for s in loaded.skipped] == ["a.pdf"]
    assert "over the cap of 100 bytes for one document (max_document_bytes)" in loaded.skipped[0].reason


def test_progress_counts_the_conversions_by_format(tmp_path: Path) -> None:
    for pages, name in enumerate(("a.pdf", "b.pdf", "c.pdf"), start=2):
        writers.pdf(tmp_path / name, pages=pages)  # three contents: none is a copy the cache finds
    heard: list[str] = []
    load_paths([str(tmp_path)], [tmp_path], progress=lambda p: heard.append(p.text()))
    assert heard == [f"converting {n}/3 PDFs" for n in range(4)]
    writers.xlsx(tmp_path / "d.xlsx")
    heard.clear()
    load_paths([str(tmp_path)], [tmp_path], progress=lambda p: heard.append(p.text()))
    assert heard[0] == "converting 0/4 documents" and heard[-1] == "converting 4/4 documents (3 from the cache)"


def test_results_keep_the_order_files_were_found_in(tmp_path: Path) -> None:
    writers.pdf(tmp_path / "b.pdf", pages=1)
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "c.txt").write_text("c")
    loaded = load_paths([str(tmp_path / "c.txt"), str(tmp_path / "b.pdf"), str(tmp_path / "a.txt")], [tmp_path])
    assert [f.path for f in loaded.files] == ["c.txt", "b.pdf", "a.txt"]
    assert [f.format for f in loaded.files] == [None, "pdf", None]


def test_a_missing_library_is_a_skipped_entry_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writers.pdf(tmp_path / "a.pdf")
    writers.ipynb(tmp_path / "b.ipynb")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pypdfium2" else real(name, *a))
    loaded = load_paths([str(tmp_path)], [tmp_path])
    assert [(s.path, s.reason) for s in loaded.skipped] == [
        (
            "a.pdf",
            "reading a PDF file needs the optional dependency 'pypdfium2': "
            'install it with pip install "rlm-adapters[documents]"',
        )
    ]
    assert [f.path for f in loaded.files] == ["b.ipynb"]


def test_only_documents_and_no_extra_is_one_error_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers.pdf(tmp_path / "a.pdf")
    writers.docx(tmp_path / "b.docx")
    real = importlib.util.find_spec
    missing = {"pypdfium2", "docx"}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a))
    with pytest.raises(FileLoadError) as caught:
        load_paths([str(tmp_path)], [tmp_path])
    message = str(caught.value)
    assert message.startswith(f"no readable text files in {[str(tmp_path)]!r} (skipped a.pdf: reading a PDF file")
    assert message.count('install it with pip install "rlm-adapters[documents]"') == 2


def test_no_sandbox_for_the_converter_skips_documents_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NoSafeLevel("none here")

    writers.pdf(tmp_path / "a.pdf")
    (tmp_path / "b.txt").write_text("text")
    monkeypatch.setattr("rlm_adapters.core.sandbox.subprocess.oneshot.detect_level", refuse)
    loaded = load_paths([str(tmp_path)], [tmp_path])
    assert [s.path for s in loaded.skipped] == ["a.pdf"]
    assert loaded.skipped[0].reason.startswith("no sandbox here can hold the document converter")


def test_cancelling_the_load_stops_the_conversions(tmp_path: Path) -> None:
    for n in range(6):
        writers.pdf(tmp_path / f"{n}.pdf", pages=2)
    cancel = threading.Event()

    def progress(p: ConversionProgress) -> None:
        if p.done >= 1:
            cancel.set()

    with pytest.raises(FileLoadError, match="reading the paths was cancelled"):
        load_paths([str(tmp_path)], [tmp_path], cancel=cancel, progress=progress)
    assert len(CONVERSIONS) < 6


def test_the_load_deadline_bounds_the_conversions(tmp_path: Path) -> None:
    """Documents that would each take their whole minute (`writers.slow_pdf`) end with the load's deadline."""
    for n in range(3):
        writers.slow_pdf(tmp_path / f"{n}.pdf", pages=40 + n)  # three contents: no cache hit between them
    started = time.monotonic()
    with pytest.raises(FileLoadError, match="took longer than the time allowed"):
        load_paths([str(tmp_path)], [tmp_path], timeout=1.0)
    assert time.monotonic() - started < 1.0 + 8.0  # the converters were killed, not waited for
    assert len(CONVERSIONS) == 0
