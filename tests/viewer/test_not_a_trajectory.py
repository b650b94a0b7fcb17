"""`rlm view` / `rlm export` refuse what is not a trajectory log, in one line (issue 17, item 3)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rlm_adapters.viewer.model import trajectory_problem
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
def test_a_reference_rlm_log_is_named_as_such(tmp_path: Path) -> None:
    from rlm.core.types import CodeBlock, REPLResult, RLMIteration, RLMMetadata
    from rlm.logger import RLMLogger as ReferenceLogger

    logger = ReferenceLogger(log_dir=str(tmp_path))
    logger.log_metadata(RLMMetadata("gpt-5-mini", 1, 30, "openai", {}, "local", {}))
    logger.log(RLMIteration("prompt", "```repl\nprint(1)\n```", [CodeBlock("print(1)", REPLResult("1\n", "", {}))]))
    assert logger.log_file_path is not None
    log = Path(logger.log_file_path)
    line = refused(rlm("view", str(log), cwd=tmp_path))
    assert "is a log of the reference RLM (alexzhang13/rlm), not of rlm-adapters" in line


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
