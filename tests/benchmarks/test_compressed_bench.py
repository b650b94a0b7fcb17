"""The compressed-text benchmark reads back the text it compressed, in every arm (small sizes: not timed here)."""

from __future__ import annotations

import shutil

from benchmarks.compressed_bench import log_text, measure


def test_the_log_text_is_what_was_asked_for() -> None:
    text = log_text(0.05, accented=True)
    assert 50_000 <= len(text) < 50_300 and text.endswith("\n")
    assert "note=" in text and text.encode("latin-1")  # accented, and all of it Latin-1
    assert log_text(0.05) == log_text(0.05) and "note=" not in log_text(0.05)  # seeded; plain ASCII without accents


def test_the_figures_cover_every_arm() -> None:
    figures = measure(mb=0.3, reps=1)  # raises when the converter's text is not the text compressed
    arms = {"rlm", "rlm_latin1", "gzip"} | ({"zcat"} if shutil.which("zcat") else set())
    assert set(figures["mb_per_s"]) == arms and all(rate > 0 for rate in figures["mb_per_s"].values())
    assert 0 < figures["gz_mb"] < figures["text_mb"] == 0.3
    if "zcat" in arms:
        assert figures["rlm_over_zcat"] > 0
