"""documents/_cache.py: a document is converted once per content for the life of the process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlm_adapters.documents import CONVERSIONS, ConversionCache, Converted, DocumentLimits
from rlm_adapters.documents._output import Refusal
from rlm_adapters.files import load_paths
from rlm_adapters.testing import reset_process_state
from tests.documents import writers


def test_a_second_load_of_the_same_folder_converts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writers.pdf(tmp_path / "a.pdf")
    writers.xlsx(tmp_path / "b.xlsx")
    first = load_paths([str(tmp_path)], [tmp_path])
    assert len(CONVERSIONS) == 2
    runs: list[object] = []
    monkeypatch.setattr("rlm_adapters.core.sandbox.subprocess.oneshot.run_walled", lambda *a, **k: runs.append(a))
    second = load_paths([str(tmp_path)], [tmp_path])
    assert runs == [] and second.documents() == first.documents()
    assert CONVERSIONS.hits == 2


def test_a_copy_under_another_name_is_found_by_content_and_an_edit_converts_again(tmp_path: Path) -> None:
    writers.pdf(tmp_path / "a.pdf")
    load_paths([str(tmp_path / "a.pdf")], [tmp_path])
    (tmp_path / "copy.pdf").write_bytes((tmp_path / "a.pdf").read_bytes())
    (copy,) = load_paths([str(tmp_path / "copy.pdf")], [tmp_path]).files
    assert CONVERSIONS.hits == 1 and copy.path == "copy.pdf" and len(CONVERSIONS) == 1
    writers.pdf(tmp_path / "a.pdf", pages=3)
    (edited,) = load_paths([str(tmp_path / "a.pdf")], [tmp_path]).files
    assert len(edited.metadata["pages"]) == 3 and len(CONVERSIONS) == 2


def test_a_timeout_is_not_kept_but_a_refusal_is(tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("a text file, so that each load reads something")
    writers.pdf(tmp_path / "locked.pdf", password="pw")
    # A PDF that takes PDFium minutes to extract, so it meets its limit however idle the machine: a tight limit
    # on a quick PDF was beaten by a warm converter on an idle one.
    writers.slow_pdf(tmp_path / "slow.pdf")
    load_paths([str(tmp_path / "locked.pdf"), str(tmp_path / "note.txt")], [tmp_path])
    tight = DocumentLimits(seconds=1.0)
    loaded = load_paths([str(tmp_path / "slow.pdf"), str(tmp_path / "note.txt")], [tmp_path], documents=tight)
    assert [s.reason for s in loaded.skipped] == ["converting it took longer than its time limit of 1 s"]
    assert list(CONVERSIONS._entries.values()) == [Refusal("encrypted: it needs a password to open")]


def test_the_cache_is_bounded_by_characters_least_recently_used_out() -> None:
    cache = ConversionCache(max_chars=10)
    cache.put("a", Converted("x" * 6, 6))
    cache.put("b", Converted("y" * 4, 4))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", Converted("z" * 3, 3))
    assert cache.get("b") is None and cache.get("a") is not None and cache.chars == 9
    cache.put("huge", Converted("w" * 11, 11))
    assert cache.get("huge") is None


def test_reset_process_state_forgets_the_conversions(tmp_path: Path) -> None:
    writers.pdf(tmp_path / "a.pdf")
    load_paths([str(tmp_path)], [tmp_path])
    assert len(CONVERSIONS) == 1 and CONVERSIONS.digest_of((0, 0, 0, 0, 0)) is None
    reset_process_state()
    assert len(CONVERSIONS) == 0 and CONVERSIONS.hits == CONVERSIONS.misses == 0
    stat = os.stat(tmp_path / "a.pdf")
    assert CONVERSIONS.digest_of((stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)) is None
