"""The README's main command, `rlm ask`, run as users run it: the installed console script."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console
from rich.status import Status

from rlm_adapters import cli
from rlm_adapters.core.events import RunStarted
from rlm_adapters.testing import FakeOpenAIServer

RLM_BIN = shutil.which("rlm")
pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")


def run_rlm(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    assert RLM_BIN is not None
    return subprocess.run([RLM_BIN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def server_env(server: FakeOpenAIServer) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    return {**clean, "RLM_MODEL": "root-model", "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test"}


def test_rlm_ask_answers_over_files_and_a_folder(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("the code word is heron\n")
    (tmp_path / "docs" / "b.txt").write_text("nothing here\n")
    (tmp_path / "big.log").write_text("line\n" * 10_000)
    fake_server.root = [
        "```repl\nhits = [d['id'] for d in context if 'code word' in d['text']]\nprint(hits)\n```",
        "FINAL_VAR(hits)",
    ]
    done = run_rlm(
        ["ask", "--context", "docs", "big.log", "--log-dir", "logs", "Which file has the code word?"],
        server_env(fake_server),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["docs/a.txt"]
    assert list((tmp_path / "logs").glob("rlm_*.jsonl"))


def test_rlm_ask_json_output_and_single_file_is_plain_text(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "one.txt").write_text("x" * 1234)
    fake_server.root = ["```repl\nFINAL(f'{type(context).__name__} {len(context)}')\n```"]
    done = run_rlm(["ask", "-c", "one.txt", "--json", "how long?"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["response"] == "str 1234" and result["finish_reason"] == "final"
    assert result["usage"]["total"]["calls"] == 1


def test_rlm_ask_without_a_model_names_the_variables(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    done = run_rlm(["ask", "-c", "a.txt", "q"], env, tmp_path)
    assert done.returncode == 2
    assert "no model configured" in done.stderr and "RLM_MODEL" in done.stderr
    assert done.stdout == ""


def test_rlm_ask_with_a_missing_file_says_which(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = run_rlm(["ask", "-c", "nope.txt", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2 and "no such file or folder: 'nope.txt'" in done.stderr


def test_rlm_ask_reports_an_unfinished_run(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    fake_server.root = ["```repl\nprint(1)\n```", "```repl\nprint(2)\n```", "best guess: 2"]
    done = run_rlm(["ask", "-c", "a.txt", "--max-iterations", "2", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 1
    assert done.stdout.strip() == "best guess: 2"
    assert "finish_reason='max_iterations'" in done.stderr


def test_rlm_ask_html_writes_the_trajectory_page(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello world")
    fake_server.root = ["```repl\nprint(len(context))\n```", "FINAL(11 characters)"]
    done = run_rlm(["ask", "-c", "a.txt", "--html", "run.html", "how long?"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") or page.lower().startswith("<!doctype html>")
    assert "11 characters" in page and "print(len(context))" in page
    assert not list(tmp_path.glob(".rlm-logs"))  # no stray log folder in the user's directory


def test_progress_clock_ticks_during_a_model_call_with_no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(cli.time, "perf_counter", lambda: now[0])
    console = Console(file=io.StringIO(), width=200)
    status = Status("", console=console)
    line = cli.ProgressLine(status, max_iterations=30)
    line(
        RunStarted(
            run_id="r",
            query="q",
            context_description={"total_chars": 1},
            root_model="m",
            sub_models=[],
            sandbox="local",
            isolation="none",
            max_iterations=30,
            max_depth=1,
        )
    )
    now[0] = 106.0  # six seconds into the first root call: no event has arrived since the start
    with console.capture() as captured:
        console.print(status.renderable)
    assert "iteration 0/30" in captured.get() and "6.0 s" in captured.get()
