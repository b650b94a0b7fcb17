import json
import math

import pytest

from rlm_adapters.evals.report import markdown, mean_ci, mean_std, render_table, summarize, write_reports


def rec(arm, length, score, status="ok", cost=0.01, tokens=(100, 10), seconds=1.0):
    return {
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
    assert (direct["ci_low"], direct["ci_high"]) == (0.0, 1.0)  # 0.5 ± 1.96 * 0.707 / 1.414, clipped
    assert direct["failures"] == 1 and direct["context_limits"] == 1
    rlm = rows[("rlm", 8192)]
    assert rlm["cost_mean"] == pytest.approx(0.03) and rlm["cost_std"] == pytest.approx(0.0141421356)
    assert rlm["tokens_mean"] == 110 and rlm["seconds_mean"] == 2.0 and rlm["failures"] == 0
    assert rows[("direct", 32768)]["failures"] == 1 and rows[("direct", 32768)]["context_limits"] == 0


def test_reports_are_written(tmp_path):
    paths = write_reports(RECORDS, tmp_path / "out", {"task": "oolong", "model": "m"})
    summary = json.loads(paths["json"].read_text())
    assert summary["meta"]["model"] == "m" and len(summary["rows"]) == 4
    text = paths["markdown"].read_text()
    assert "| oolong | direct | 8k | 2 | 0.500 [0.000, 1.000] |" in text
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
