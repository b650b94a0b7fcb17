"""documents/_convert.py: however many loads run at once, converters run at most one per core."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.sandbox.subprocess import oneshot
from rlm_adapters.documents import DocumentLimits, _convert
from rlm_adapters.errors import FileLoadError
from rlm_adapters.files import LoadResult, load_paths
from tests.documents import writers


def test_two_loads_at_once_share_the_converter_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running, peak, lock = [0], [0], threading.Lock()
    real = oneshot.WalledServer.run

    def counted(*args: Any, **kwargs: Any) -> Any:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(oneshot.WalledServer, "run", counted)  # each document: one request to a batch's server
    monkeypatch.setattr(_convert, "CONVERTER_SLOTS", threading.BoundedSemaphore(1))
    folders = [tmp_path / "a", tmp_path / "b"]
    for index, folder in enumerate(folders):
        folder.mkdir()
        for n in range(3):
            writers.pdf(folder / f"{n}.pdf", pages=2 + n + 3 * index)  # six contents: no cache hit
    results: list[LoadResult] = []
    limits = DocumentLimits(parallel=2)
    loads = [
        threading.Thread(target=lambda f=f: results.append(load_paths([str(f)], [f], documents=limits)))
        for f in folders
    ]
    for load in loads:
        load.start()
    for load in loads:
        load.join(120)
    assert sorted(len(r.files) for r in results) == [3, 3]
    assert peak[0] == 1  # two loads of two conversions at a time, one slot


def test_a_load_waiting_for_a_slot_stops_at_its_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slots = threading.BoundedSemaphore(1)
    monkeypatch.setattr(_convert, "CONVERTER_SLOTS", slots)
    writers.pdf(tmp_path / "a.pdf")
    (tmp_path / "b.txt").write_text("text")
    assert slots.acquire(timeout=1)  # another call holds the only slot
    try:
        with pytest.raises(FileLoadError, match="took longer than the time allowed"):
            load_paths([str(tmp_path)], [tmp_path], timeout=0.5)
    finally:
        slots.release()


def test_a_batch_starts_one_converter_per_slot_and_forks_a_child_per_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 36: a fresh interpreter and its imports per document cost most of a small PDF's time.
    starts: list[int] = []
    real = oneshot.WalledServer._start

    def counted(self: oneshot.WalledServer, *args: Any) -> None:
        starts.append(1)
        real(self, *args)

    monkeypatch.setattr(oneshot.WalledServer, "_start", counted)
    for n in range(4):
        writers.pdf(tmp_path / f"{n}.pdf", pages=1 + n)
    writers.understated_dimension_xlsx(tmp_path / "book.xlsx")
    loaded = load_paths([str(tmp_path)], [tmp_path], documents=DocumentLimits(parallel=1))
    assert loaded.skipped == [] and len(loaded.files) == 5
    assert len(starts) == 2  # one for the PDFs, one for the workbook: not one per document
