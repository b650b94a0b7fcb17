"""The nested benchmark counts the sandboxes' processes and memory while the children run."""

from __future__ import annotations

from benchmarks.nested_bench import measure


def test_a_burst_of_children_shows_one_process_at_least_per_sandbox_and_their_memory() -> None:
    row = measure(3, None, latency=0.02, settle=0.2)
    assert row["children"] == 3 and row["max_sandboxes"] == 32
    assert row["peak_processes"] >= 4  # the parent's sandbox and three children's, each one process or more
    assert row["peak_pss_mib"] > 0 and row["peak_rss_mib"] >= row["peak_pss_mib"]
    assert row["seconds"] >= 0.06  # the parent's turn, then each child's two turns
