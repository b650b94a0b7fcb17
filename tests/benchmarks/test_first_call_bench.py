"""The first-call benchmark runs a case in a fresh interpreter and measures the loop (no timing is asserted)."""

from __future__ import annotations

from benchmarks.first_call_bench import measure


def test_a_backend_and_a_sandbox_case_run_to_their_answer() -> None:
    for case in ("openai", "subprocess"):
        row = measure(case, reps=1)
        assert row["error"] is None, row
        assert row["first_call_s"] > 0 and row["max_lag_ms"] >= 0 and row["held_ms"] >= 0
