"""`benchmarks.keys_bench` times every shape of a key's bookkeeping (timings are never asserted)."""

from __future__ import annotations

import pytest

from benchmarks.keys_bench import measure


@pytest.mark.timeout(120)
def test_the_keys_benchmark_times_the_lookup_and_each_call_s_hold_and_settlement(store_url: str) -> None:
    results = measure(store_url, calls=8)
    assert {shape: figures["n"] for shape, figures in results.items()} == {
        "lookup": 8,
        "lookup, remembered": 8,
        "hold + settle": 8,
    }
    assert all(0 < figures["p50_ms"] <= figures["p99_ms"] for figures in results.values())
