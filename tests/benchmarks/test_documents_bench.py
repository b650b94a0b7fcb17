"""The documents benchmark converts the same PDFs in both arms (small sizes: it is not timed here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.documents_bench import convert_on_host, convert_sandboxed, measure, write_pdf


def test_both_arms_convert_the_same_pdf_to_the_same_text(tmp_path: Path) -> None:
    pytest.importorskip("fpdf", reason="needs fpdf2 (the dev extra) to write PDFs")
    path = write_pdf(tmp_path / "a.pdf", 3)
    (sandboxed,) = convert_sandboxed([path])
    assert sandboxed.size == convert_on_host(str(path)) and "File 0, page 3." in sandboxed.text


def test_the_figures_cover_both_arms_and_the_cache() -> None:
    pytest.importorskip("fpdf", reason="needs fpdf2 (the dev extra) to write PDFs")
    figures = measure(pdfs=3, pages=2, long=4, reps=1)
    for arm in ("sandboxed", "host"):
        assert figures["long_pdf"][f"{arm}_pages_per_s"] > 0 and figures["batch"][f"{arm}_mb_per_s"] > 0
    assert figures["batch"]["cached_seconds"] < figures["batch"]["sandboxed_seconds"]
