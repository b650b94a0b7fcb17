"""The reply size benchmark measures a read reply and a refused one (small sizes: it is not timed here)."""

from __future__ import annotations

import pytest

from benchmarks.reply_size_bench import MIB, measure


@pytest.mark.slow
def test_the_benchmark_reads_an_allowed_reply_and_refuses_one_over_the_cap() -> None:
    read = measure("uncapped", 8, 9 * MIB)
    assert read.outcome == "read 8 MiB"
    refused = measure("chunked", 64, 1 * MIB, chunked=True)
    assert refused.outcome.startswith("ModelError") and "max_reply_bytes" in refused.outcome
    assert refused.peak_mib > 0 and refused.above_start_mib < 64
