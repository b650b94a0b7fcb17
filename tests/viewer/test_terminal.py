"""The terminal tree: its structure (not its colours), `--full`, and `--follow` on a growing log."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from rlm_adapters.viewer.log_build import load
from rlm_adapters.viewer.terminal import follow, render
from tests.viewer.conftest import SUB_RESULT


def _text(log: Path, *, full: bool = False, width: int = 200) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    console.print(render(load(log), full=full))
    return console.export_text()


def _indent(lines: list[str], needle: str) -> int:
    line = next(line for line in lines if needle in line)
    return len(line) - len(line.lstrip("│├└─ "))


def test_tree_shows_iterations_cells_batches_and_nested_runs(recorded_log: Path) -> None:
    text = _text(recorded_log)
    lines = text.splitlines()
    root_id = load(recorded_log).root.run_id[:8]
    assert lines[1].startswith(f"RLM {root_id} · depth 0 · root-m · final · 3 iterations")
    top = _indent(lines, "query: What is the answer?")
    iterations = [line.strip("│├└─ ").split(" ·")[0] for line in lines if "iteration " in line and "·" in line]
    assert [
        i
        for i, line in zip(iterations, [ln for ln in lines if "iteration " in ln and "·" in ln], strict=True)
        if _indent([line], "iteration") == top
    ] == ["iteration 1", "iteration 2", "iteration 3"]
    assert "llm_query × 4 · sub-m · latency" in text
    assert "… 3 more calls (--full shows them)" in text
    assert "print(context[:60])" in text  # a cell's code
    assert "answer: 42" in text
    assert text.rstrip().splitlines()[-1].startswith("usage: total 10 calls")
    # The nested run sits under the cell that made it, deeper than that cell; its answer deeper still.
    assert _indent(lines, "nested RLM") > _indent(lines, "cell 2")
    assert _indent(lines, "answer: nested ok") > _indent(lines, "nested RLM")
    assert _indent(lines, "answer: nested ok") > _indent(lines, "answer: 42")


def test_full_shows_every_call_and_long_texts_untruncated(recorded_log: Path) -> None:
    short, full = _text(recorded_log), _text(recorded_log, full=True)
    assert SUB_RESULT not in short  # the 4th call's reply is hidden by default
    assert SUB_RESULT in full and "more calls" not in full
    assert full.count("prompt: Find the needle in part") == 4
    # Default output cuts long texts with a count of what it left out; --full does not.
    assert "line 6" in short and "line 7" not in short and "chars]" in short
    assert "line 19" in full


def test_follow_redraws_until_the_run_ends(recorded_log: Path, tmp_path: Path) -> None:
    lines = recorded_log.read_text(encoding="utf-8").splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_text("".join(lines[:5]), encoding="utf-8")
    remaining = lines[5:]
    waits: list[float] = []

    def writer(interval: float) -> None:
        # Stands in for the running RLM: each pause, a few more lines (the last one torn until next time).
        waits.append(interval)
        chunk = remaining[:7]
        del remaining[:7]
        with live.open("a", encoding="utf-8") as handle:
            handle.write("".join(chunk))

    console = Console(record=True, width=200, file=io.StringIO(), color_system=None)
    trajectory = follow(live, console, interval=0.25, wait=writer, max_polls=100)
    assert trajectory.finished and trajectory.root.response == "42"
    assert not remaining and waits == [0.25] * len(waits) and len(waits) == -(-(len(lines) - 5) // 7)
    assert "answer: 42" in console.export_text()


def test_follow_gives_up_after_max_polls_on_a_stalled_log(recorded_log: Path, tmp_path: Path) -> None:
    stalled = tmp_path / "stalled.jsonl"
    stalled.write_text("".join(recorded_log.read_text(encoding="utf-8").splitlines(keepends=True)[:4]))
    console = Console(record=True, width=200, file=io.StringIO(), color_system=None)
    calls: list[float] = []
    trajectory = follow(stalled, console, wait=calls.append, max_polls=3)
    assert not trajectory.finished and len(calls) == 3
    assert "running" in console.export_text()
