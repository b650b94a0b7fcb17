"""``rlm eval --repeats K`` (issue 50): each instance K times per arm, each repeat a new sample (its calls cached
in a scope of its own), a rerun free, and the report's interval and spread; the ``routed`` arm."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.lm.scripted import ScriptedModel
from tests.evals.test_eval_command import run

ARGS = [
    "sniah",
    "--model",
    "flaky",
    "--n",
    "2",
    "--lengths",
    "2k",
    "--arms",
    "direct,routed",
    "--repeats",
    "3",
    "--concurrency",
    "1",
]


def flaky_root() -> tuple[ScriptedModel, list[int]]:
    """A root model that misses the needle on every third call it is asked (a model's run-to-run variance)."""
    calls: list[int] = []
    turns = itertools.count()

    def answer(messages: list[Message]) -> str:
        calls.append(1)
        found = re.search(r"is: (\d{7})", messages[-1]["content"])
        return found.group(1) if found and next(turns) % 3 != 1 else "I cannot tell."

    return ScriptedModel(answer, model_name="flaky"), calls


def test_repeats_are_new_samples_and_a_rerun_asks_nothing(tmp_path: Path) -> None:
    root, calls = flaky_root()
    code, table = run(ARGS, tmp_path, root)
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 2 * 3 and sorted({r["repeat"] for r in records}) == [0, 1, 2]
    assert len(calls) == 12  # every repeat asked the model: none replayed another's answer
    assert {r["extra"].get("route") for r in records if r["arm"] == "routed"} == {"direct"}  # 2k is under it
    assert "2x3" in table and "score (95% CI)" in table and "spread" in table and "latency p50 / p90" in table
    summary = json.loads((tmp_path / "summary.json").read_text())
    direct = next(row for row in summary["rows"] if row["arm"] == "direct")
    assert (direct["instances"], direct["repeats"], direct["n"]) == (2, 3, 6)
    assert direct["repeat_spread"] > 0 and direct["ci_low"] < direct["score"] < direct["ci_high"]
    assert json.loads((tmp_path / "summary.json").read_text())["meta"]["repeats"] == 3
    again, _ = run(ARGS, tmp_path, flaky_root()[0])
    assert again == 0 and len(calls) == 12


def test_a_removed_results_file_is_rebuilt_from_the_cache_for_free(tmp_path: Path) -> None:
    root, _ = flaky_root()
    run(ARGS, tmp_path, root)
    first = (tmp_path / "summary.json").read_text()
    (tmp_path / "results.jsonl").unlink()
    fresh, fresh_calls = flaky_root()
    assert run(ARGS, tmp_path, fresh)[0] == 0
    assert fresh_calls == []  # each repeat replays its own calls, so the same answers come back
    rows = json.loads(first)["rows"]
    again = json.loads((tmp_path / "summary.json").read_text())["rows"]
    assert [r["score"] for r in rows] == [r["score"] for r in again]


@pytest.mark.parametrize("bad", ["0", "-2"])
def test_a_bad_repeat_count_is_one_line(tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run([*ARGS[:-4], "--repeats", bad], tmp_path, flaky_root()[0])
    assert code == 2
    assert f"--repeats must be a whole number >= 1 (runs of each instance), got {bad}" in capsys.readouterr().err
