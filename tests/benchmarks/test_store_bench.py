"""`benchmarks.store_bench` measures both stores in every shape (timings are never asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.store_bench import BATCH, measure


@pytest.mark.timeout(120)
def test_the_store_benchmark_times_every_shape_of_both_stores(store_url: str, tmp_path: Path) -> None:
    results = measure(store_url, tmp_path, calls=BATCH, rounds=1)
    assert set(results) == {"sqlite", "postgresql"}
    for shapes in results.values():
        assert {shape: figures["n"] for shape, figures in shapes.items()} == {
            "miss": BATCH,
            "hit": BATCH,
            f"miss, {BATCH} at once": BATCH,
        }
        assert all(0 < figures["p50_ms"] <= figures["p99_ms"] for figures in shapes.values())
