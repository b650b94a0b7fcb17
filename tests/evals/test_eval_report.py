import json
import math

import pytest

from rlm_adapters.evals.report import (
    bootstrap_ci,
    markdown,
    mean_ci,
    mean_std,
    percentile,
    render_table,
    repeat_spread,
    summarize,
    write_reports,
)

COUNT = iter(range(10_000))


def rec(arm, length, score, status="ok", cost=0.01, tokens=(100, 10), seconds=1.0, instance=None, route="rlm"):
    return {
        "instance": instance or f"i{next(COUNT)}",
        "extra": {"route": route},
        "task": "oolong",
        "arm": arm,
        "length": length,
        "score": score,
        "status": status,
        "cost": cost,
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
        "seconds": seconds,
    }


RECORDS = [
    rec("direct", 8192, 1.0),
    rec("direct", 8192, 0.0, status="context_limit", cost=0.0),
    rec("rlm", 8192, 1.0, cost=0.02),
    rec("rlm", 8192, 1.0, cost=0.04, seconds=3.0),
    rec("rlm", 32768, 0.5),
    rec("direct", 32768, 0.0, status="error"),
]


def test_summary_rows_by_hand():
    rows = {(r["arm"], r["length"]): r for r in summarize(RECORDS)}
    direct = rows[("direct", 8192)]
    assert direct["n"] == 2 and direct["score"] == 0.5
    assert (direct["ci_low"], direct["ci_high"]) == (0.0, 1.0)  # two instances, 1 and 0: resampled, 0 to 1
    assert (direct["instances"], direct["repeats"]) == (2, 1) and math.isnan(direct["repeat_spread"])
    assert direct["failures"] == 1 and direct["context_limits"] == 1
    rlm = rows[("rlm", 8192)]
    assert rlm["cost_mean"] == pytest.approx(0.03) and rlm["cost_std"] == pytest.approx(0.0141421356)
    assert rlm["tokens_mean"] == 110 and rlm["seconds_mean"] == 2.0 and rlm["failures"] == 0
    assert (rlm["cost_p50"], rlm["cost_p90"]) == pytest.approx((0.03, 0.038))
    assert (rlm["seconds_p50"], rlm["seconds_p90"]) == pytest.approx((2.0, 2.8))
    assert rows[("direct", 32768)]["failures"] == 1 and rows[("direct", 32768)]["context_limits"] == 0


def test_reports_are_written(tmp_path):
    paths = write_reports(RECORDS, tmp_path / "out", {"task": "oolong", "model": "m"})
    summary = json.loads(paths["json"].read_text())
    assert summary["meta"]["model"] == "m" and len(summary["rows"]) == 4
    text = paths["markdown"].read_text()
    assert "| oolong | direct | 8k | 2x1 | 0.500 [0.000, 1.000] | - | $0.0050 / $0.0090 | 1.0s / 1.0s |" in text
    assert "1 (1 context limit)" in text and "score_vs_length.png" in text
    png = paths["plot"].read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


def test_markdown_and_table_render_every_row():
    rows = summarize(RECORDS)
    assert markdown(rows, {}).count("| oolong |") == 4
    assert render_table(rows).row_count == 4


def test_mean_ci_and_std_by_hand():
    mean, low, high = mean_ci([0.5, 0.7, 0.6, 0.6])
    half = 1.96 * math.sqrt(0.02 / 3) / 2
    assert (mean, low, high) == pytest.approx((0.6, 0.6 - half, 0.6 + half))
    assert mean_ci([1.0, 0.0, 1.0, 0.0]) == pytest.approx((0.5, 0.0, 1.0))  # clipped both ways
    assert mean_ci([1.0]) == (1.0, 1.0, 1.0)
    assert mean_ci([1.0, 1.0, 0.9])[2] == 1.0  # clipped
    assert mean_std([2.0, 4.0]) == pytest.approx((3.0, math.sqrt(2)))
    assert all(math.isnan(x) for x in mean_ci([]))


def test_repeats_give_a_bootstrap_interval_over_instances_and_repeats_and_their_spread():
    steady = [rec("rlm", 8192, 1.0, instance=f"s{i}") for i in range(5) for _ in range(3)]
    flaky = [rec("rlm", 8192, float((k + 1) % 2), instance=f"f{i}") for i in range(5) for k in range(3)]
    [row_steady] = summarize(steady)
    [row_flaky] = summarize(flaky)
    assert (row_steady["instances"], row_steady["repeats"], row_steady["n"]) == (5, 3, 15)
    assert (row_steady["ci_low"], row_steady["ci_high"], row_steady["repeat_spread"]) == (1.0, 1.0, 0.0)
    # Each flaky instance scores 1, 0, 1: its repeats disagree, and the interval is wide though every
    # instance has the same mean (the repeats are resampled too).
    assert row_flaky["score"] == pytest.approx(2 / 3)
    assert row_flaky["repeat_spread"] == pytest.approx(math.sqrt(1 / 3))
    assert row_flaky["ci_low"] < 0.5 and row_flaky["ci_high"] > 0.8
    assert bootstrap_ci([[1.0, 0.0, 1.0]] * 5) == bootstrap_ci([[1.0, 0.0, 1.0]] * 5)  # a fixed seed
    assert repeat_spread([[1.0], [0.0]]) != repeat_spread([[1.0], [0.0]])  # NaN: no instance ran twice
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0 and math.isnan(percentile([], 0.9))


def test_the_routed_arm_counts_its_direct_runs():
    rows = summarize([rec("routed", 8192, 1.0, route="direct"), rec("routed", 8192, 1.0)])
    assert rows[0]["direct_runs"] == 1 and "1 direct" in markdown(rows, {})
