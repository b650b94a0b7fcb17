"""`rlm view` / `rlm export` refuse what is not a trajectory log, in one line (issue 17, item 3)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rlm_adapters.viewer.log_build import trajectory_problem
from tests.viewer.conftest import RecordRun

RLM_BIN = shutil.which("rlm")
pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is missing (pip install -e .)")


def rlm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert RLM_BIN is not None
    return subprocess.run([RLM_BIN, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a refusal (exit status 2, nothing on stdout, no traceback)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_a_binary_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ls").write_bytes(bytes(range(256)) * 40)
    line = refused(rlm("view", "ls", cwd=tmp_path))
    assert line.startswith("rlm view: 'ls' is not a trajectory log: its first line is not JSON")


def test_a_text_file_is_refused_not_shown_as_a_running_run(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("just some notes\nand more\n")
    (tmp_path / "other.jsonl").write_text('{"id": 1, "text": "a dataset line"}\n')
    (tmp_path / "empty.jsonl").write_text("")
    assert "its first line is not JSON" in refused(rlm("view", "t.txt", cwd=tmp_path))
    assert "is not a header record" in refused(rlm("view", "other.jsonl", cwd=tmp_path))
    assert "'empty.jsonl' is empty" in refused(rlm("view", "empty.jsonl", cwd=tmp_path))
    assert "is not a header record" in refused(rlm("view", "--html", "out.html", "other.jsonl", cwd=tmp_path))
    assert not (tmp_path / "out.html").exists()
    assert "is not a header record" in refused(rlm("export", "other.jsonl", cwd=tmp_path))


@pytest.mark.skipif(
    importlib.util.find_spec("rlm") is None, reason="needs the reference RLM (pip install -e '.[bench]', rlms==0.1.3)"
)
def test_a_reference_rlm_log_is_shown_with_its_turns_cells_and_sub_calls(tmp_path: Path) -> None:
    """Written by the reference's own logger (rlms 0.1.3), with its own record types."""
    from rlm.core.types import (
        CodeBlock,
        ModelUsageSummary,
        REPLResult,
        RLMChatCompletion,
        RLMIteration,
        RLMMetadata,
        UsageSummary,
    )
    from rlm.logger import RLMLogger as ReferenceLogger

    logger = ReferenceLogger(log_dir=str(tmp_path))
    logger.log_metadata(RLMMetadata("gpt-5-mini", 1, 30, "openai", {}, "local", {}, ["openai"]))
    usage = UsageSummary({"gpt-5-nano": ModelUsageSummary(1, 120, 7)})
    call = RLMChatCompletion("gpt-5-nano", "Find the needle in part 3", "NEEDLE-FOUND-7", usage, 0.4)
    prompt = [{"role": "system", "content": "You are an RLM."}, {"role": "user", "content": "Where is it?"}]
    looked = REPLResult("part 3 says NEEDLE-FOUND-7\n", "", {}, 0.5, [call])
    logger.log(RLMIteration(prompt, "```repl\nx = llm_query(p)\n```", [CodeBlock("x = llm_query(p)", looked)]))
    logger.log(RLMIteration([*prompt, {"role": "assistant", "content": "..."}], "FINAL", [], final_answer="part 3"))
    assert logger.log_file_path is not None
    log = Path(logger.log_file_path)
    assert trajectory_problem(log) is None
    done = rlm("view", "--no-color", "--full", str(log), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for shown in ("x = llm_query(p)", "NEEDLE-FOUND-7", "Find the needle in part 3", "part 3"):
        assert shown in done.stdout, shown
    usage_line = " ".join(done.stdout.split()[-30:])
    assert "other model calls (incl. nested roots) 1 calls" in usage_line and "running" not in done.stdout.lower()
    page = rlm("view", str(log), "--html", "ref.html", cwd=tmp_path)
    assert page.returncode == 0 and "NEEDLE-FOUND-7" in (tmp_path / "ref.html").read_text(encoding="utf-8")


def test_a_folder_skips_files_that_are_not_runs(record_run: RecordRun, tmp_path: Path) -> None:
    log = record_run(log_dir=tmp_path / "logs")
    stray = tmp_path / "logs" / "rlm_zz_notes.jsonl"  # sorts and is modified after the real log
    stray.write_text('{"note": "not a run"}\n')
    os.utime(stray, (log.stat().st_mtime + 10, log.stat().st_mtime + 10))
    done = rlm("view", "--no-color", "logs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "42" in done.stdout
    assert trajectory_problem(log) is None


def test_the_terminal_summary_labels_model_calls_below_the_root(record_run: RecordRun, tmp_path: Path) -> None:
    log = record_run(log_dir=tmp_path / "logs")
    done = rlm("view", "--no-color", str(log), cwd=tmp_path)
    usage = " ".join(done.stdout.split()[-40:])
    assert "root (depth 0) 3 calls" in usage and "other model calls (incl. nested roots) 7 calls" in usage


def test_the_gold_file_format_is_in_the_help_and_works_as_shown(record_run: RecordRun, tmp_path: Path) -> None:
    """`rlm export --help` documents --only-correct's file (issue 17, item 7); its example shapes work."""
    shown = " ".join(rlm("export", "--help", cwd=tmp_path).stdout.split())
    assert '{"query": "How many users?", "answer": "42"}' in shown
    assert '{"run_id": "3f2c...", "answers": ["42", "forty-two"]}' in shown
    log = record_run(log_dir=tmp_path / "logs")  # its query is "What is the answer?", its answer 42
    run_id = json.loads(log.read_text(encoding="utf-8").splitlines()[0])["run_id"]
    cases = {
        '{"query": "What is the answer?", "answer": "42"}': "1 kept",
        f'{{"run_id": "{run_id}", "answers": ["41", "forty-two", "42"]}}': "1 kept",
        '{"query": "What is the answer?", "answer": "41"}': "0 kept",
    }
    for line, kept in cases.items():
        (tmp_path / "gold.jsonl").write_text(line + "\n")
        done = rlm("export", "logs", "--only-correct", "gold.jsonl", "-o", "out.jsonl", cwd=tmp_path)
        assert done.returncode == 0 and kept in done.stderr, (line, done.stderr)
