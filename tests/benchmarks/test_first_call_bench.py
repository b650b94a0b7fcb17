"""The first-call benchmark runs a case in a fresh interpreter and measures the loop (no timing is asserted)."""

from __future__ import annotations

import pytest

from benchmarks.first_call_bench import engine_imports, measure


@pytest.mark.slow
def test_a_backend_and_a_sandbox_case_run_to_their_answer() -> None:
    for case in ("openai", "subprocess"):
        row = measure(case, reps=1)
        assert row["error"] is None, row
        assert row["first_call_s"] > 0 and row["max_lag_ms"] >= 0 and row["held_ms"] >= 0


def test_the_imports_mode_counts_only_what_the_engine_adds_to_the_sdk() -> None:
    found = engine_imports(reps=1, top=500)
    names = [name for name, _ in found["largest"]]
    assert found["ours_modules"] > 10 and "rlm_adapters.core.events" in names
    assert "openai" not in names and "httpx" not in names  # the SDK's own first request loads those
    assert found["ms"] >= found["ours_ms"] > 0
