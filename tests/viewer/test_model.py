"""Building the tree of runs, iterations, cells and batches from a log."""

from __future__ import annotations

import json
from pathlib import Path

from rlm_adapters.core.trajectory import read_trajectory
from rlm_adapters.viewer.html import bar_count
from rlm_adapters.viewer.log_build import build, load
from tests.viewer.conftest import NESTED_PROMPT, SUB_RESULT


def test_recorded_run_becomes_a_tree(recorded_log: Path) -> None:
    trajectory = load(recorded_log)
    root = trajectory.root
    assert trajectory.finished
    assert root.finish_reason == "final" and root.response == "42"
    assert [item.number for item in root.iterations] == [1, 2, 3]
    assert [(cell.iteration, cell.index) for cell in root.cells()] == [(1, 1), (2, 1), (2, 2)]
    first, fan_out, recurse = root.cells()
    assert not first.batches and not first.children
    (batch,) = fan_out.batches
    assert batch.kind == "llm_query" and batch.size == 4 and len(batch.calls) == 4
    assert [call.response for call in batch.calls].count(SUB_RESULT) == 1
    assert not recurse.batches
    (nested,) = recurse.children
    assert nested.depth == 1 and nested.parent_run_id == root.run_id and nested.response == "nested ok"
    (nested_batch,) = nested.batches()
    assert nested_batch.size == 1 and nested_batch.calls[0].prompt == NESTED_PROMPT
    # Everything nests inside its parent's time span.
    assert recurse.start <= nested.start <= (nested.end or 0) <= recurse.end
    assert fan_out.start <= batch.start <= batch.end <= fan_out.end
    # 3 root turns + 3 cells + 1 batch, then 2 nested turns + 1 cell + 1 batch.
    assert bar_count(trajectory) == 11


def test_live_log_keeps_sub_calls_of_the_running_cell(recorded_log: Path) -> None:
    lines = recorded_log.read_text(encoding="utf-8").splitlines()
    # Cut the log right after the third sub-call of the batch started, mid-way through a line.
    starts = [i for i, line in enumerate(lines) if '"sub_call_start"' in line]
    cut = [*lines[: starts[2] + 1], lines[starts[2] + 1][:25]]
    torn = recorded_log.with_name("torn.jsonl")
    torn.write_text("\n".join(cut), encoding="utf-8")
    trajectory = load(torn)
    assert not trajectory.finished
    running = trajectory.root.cells()[-1]
    assert running.running and running.iteration == 2
    (batch,) = running.batches
    assert len(batch.calls) == 3 and batch.finished == 2


def test_forced_last_answer_is_its_own_iteration(recorded_log: Path) -> None:
    header, events = read_trajectory(recorded_log)
    turn = next(e for e in events if e["kind"] == "root_call" and e["depth"] == 0 and e["iteration"] == 3)
    extra = dict(turn, reply="best guess", time=turn["time"] + 0.001)
    trajectory = build(header, [*events[:-1], extra, events[-1]])
    assert [item.number for item in trajectory.root.iterations] == [1, 2, 3, 3]
    assert trajectory.root.iterations[-1].turn is not None
    assert trajectory.root.iterations[-1].turn.reply == "best guess"


def test_log_without_header_still_builds(recorded_log: Path) -> None:
    lines = recorded_log.read_text(encoding="utf-8").splitlines()[1:]
    headless = recorded_log.with_name("headless.jsonl")
    headless.write_text("\n".join(lines) + "\n", encoding="utf-8")
    trajectory = load(headless)
    assert trajectory.root.depth == 0 and trajectory.root.response == "42"
    assert json.loads(lines[0])["kind"] == "run_start"
