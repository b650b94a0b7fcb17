"""The streaming benchmark runs and reports a first chunk no earlier than the model calls allow."""

from __future__ import annotations

from benchmarks.streaming_bench import measure


def test_first_chunk_comes_after_the_model_calls_and_before_the_last() -> None:
    row = measure(latency=0.05, reps=1)
    assert row["floor"] <= row["first_chunk"] <= row["last_chunk"]
