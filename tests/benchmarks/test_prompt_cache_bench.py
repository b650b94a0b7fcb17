"""The prompt-cache benchmark runs, and its two runs cost what the fake billed."""

from __future__ import annotations

import pytest

pytest.importorskip("anthropic", reason="the benchmark talks to the Anthropic fake through the anthropic SDK")

from benchmarks.prompt_cache_bench import measure


@pytest.mark.filterwarnings("ignore:The model:DeprecationWarning")
def test_caching_cuts_the_input_cost_and_the_engine_counts_the_bill() -> None:
    row = measure(iterations=6, output_chars=600)
    off, on = row["off"], row["on"]
    assert off["input_tokens"] == on["input_tokens"]  # the same prompts, billed differently
    assert off["cache_read_tokens"] == 0 and on["cache_read_tokens"] > 0
    for run in (off, on):
        assert run["engine_input_cost"] == pytest.approx(run["input_cost"])
    assert row["ratio"] < 0.6
