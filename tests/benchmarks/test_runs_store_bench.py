"""`benchmarks.runs_store_bench` times every shape of both run stores (timings are never asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.runs_store_bench import SHAPES, measure


@pytest.mark.timeout(120)
def test_the_runs_store_benchmark_times_every_shape_of_both_stores(store_url: str, tmp_path: Path) -> None:
    results = measure(store_url, tmp_path, runs=8, rounds=1)
    assert set(results) == {"cache folder", "postgresql"}
    for shapes in results.values():
        assert {shape: figures["n"] for shape, figures in shapes.items()} == dict.fromkeys(SHAPES, 8)
        assert all(0 < figures["p50_ms"] <= figures["p99_ms"] for figures in shapes.values())
