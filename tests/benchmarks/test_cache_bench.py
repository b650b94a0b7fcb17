"""The cache benchmark runs both measurements with the request counts it expects (timings never asserted)."""

from __future__ import annotations

import json

import pytest

from benchmarks.cache_bench import main


@pytest.mark.slow
def test_the_quick_cache_benchmark_checks_its_request_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [row] = data["cost"]
    assert row["scenario"] == "fan-out 64" and len(row["cache_runs"]) == len(row["no_cache_runs"]) == 2
    # Each run's counts were checked on the server; a replayed run made none at all.
    assert data["payoff"]["requests"] == {"fresh": 19, "resumed after turn 1": 10, "replayed whole": 0}
    assert all(data["payoff"][f"{arm}_median"] > 0 for arm in data["payoff"]["requests"])
