"""The README's main command, `rlm ask`, run as users run it: the installed console script."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.status import Status

from rlm_adapters import RLM
from rlm_adapters.cli import ask, main
from rlm_adapters.core.events import RunStarted
from rlm_adapters.core.settings import DEFAULTS
from rlm_adapters.testing import FakeOpenAIServer

RLM_BIN = shutil.which("rlm")
pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")


def run_rlm(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    assert RLM_BIN is not None
    return subprocess.run([RLM_BIN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def server_env(server: FakeOpenAIServer) -> dict[str, str]:
    # RLM_DOCUMENT_CACHE stays: conftest turns the conversions' store off, so no test writes the user's folder.
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_")) or k == "RLM_DOCUMENT_CACHE"
    }
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


def test_rlm_ask_without_flags_runs_with_the_engines_defaults(
    fake_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flags restate no default: the RLM `rlm ask` builds is what `RLM` gives when nothing is set."""
    built: list[RLM] = []

    class Recorded(RLM):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    (tmp_path / "a.txt").write_text("x")
    fake_server.root = ["FINAL(ok)"]
    for name, value in server_env(fake_server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ask, "RLM", Recorded)
    assert main(["ask", "-c", "a.txt", "-q", "q"]) == 0
    # But one: a failed run is printed as one line and exit 1 (issue 51), not raised inside the command.
    assert built[0].settings == dataclasses.replace(DEFAULTS, raise_on_error=False)


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


@pytest.mark.slow
def test_rlm_ask_caps_what_context_reads_and_names_its_own_flags(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x" * 100)
    (tmp_path / "b.txt").write_text("y" * 100)
    env = server_env(fake_server)
    over = run_rlm(["ask", "-c", "a.txt", "b.txt", "--max-bytes", "150", "q"], env, tmp_path)
    assert over.returncode == 2 and "over the cap of 150 bytes (--max-bytes)" in over.stderr, over.stderr
    many = run_rlm(["ask", "-c", "a.txt", "b.txt", "--max-files", "1", "q"], env, tmp_path)
    assert many.returncode == 2 and "more than 1 files; narrow them (or raise --max-files)" in many.stderr
    zero = run_rlm(["ask", "-c", "a.txt", "--max-bytes", "0", "q"], env, tmp_path)
    assert zero.returncode == 2 and "argument --max-bytes: 0 is below the minimum of 1" in zero.stderr
    assert fake_server.requests_log == [], "a refused context reached the model"
    fake_server.root = ["FINAL('two files read')"]
    within = run_rlm(
        ["ask", "-c", "a.txt", "b.txt", "--max-bytes", "200", "--environment", "local", "q"], env, tmp_path
    )
    assert within.returncode == 0 and within.stdout == "two files read\n", within.stderr


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


# -- a newcomer's first hour (issue 17, items 4, 5 and 7) ---------------------------------------------------


def one_line(stderr: str) -> str:
    """The error, which must be exactly one unwrapped line and no traceback."""
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return stderr


@pytest.mark.parametrize("question", ["", "   "])
def test_an_empty_question_is_bad_input(fake_server: FakeOpenAIServer, tmp_path: Path, question: str) -> None:
    (tmp_path / "f.txt").write_text("text")
    done = run_rlm(["ask", "-c", "f.txt", question], server_env(fake_server), tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done.stderr).startswith("rlm ask: the question is empty")
    assert fake_server.counters.requests == 0


def test_an_unknown_flag_is_named_in_one_line(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("text")
    done = run_rlm(["ask", "-c", "f.txt", "--bogus", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2
    assert one_line(done.stderr) == "rlm ask: unknown flag --bogus; rlm ask --help lists the flags\n"
    assert fake_server.counters.requests == 0


@pytest.mark.slow
def test_a_skipped_absolute_path_keeps_its_leading_slash(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    binary = tmp_path / "elsewhere" / "ls"
    binary.write_bytes(b"\x7fELF\x00\x00" * 100)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("notes")
    fake_server.root = ["FINAL(ok)"]
    done = run_rlm(["ask", "-c", str(binary), "notes.txt", "q"], server_env(fake_server), tmp_path / "work")
    assert done.returncode == 0, done.stderr
    assert f"rlm: skipped {binary}: binary file" in done.stderr
    alone = run_rlm(["ask", "-c", str(binary), "q"], server_env(fake_server), tmp_path / "work")
    assert alone.returncode == 2 and f"(skipped {binary}: binary file)" in one_line(alone.stderr)


@pytest.mark.slow
def test_a_run_out_of_iterations_says_which_flag_to_raise(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    fake_server.root = ["```repl\nprint(1)\n```", "my best guess"]
    done = run_rlm(["ask", "-c", "a.txt", "--max-iterations", "1", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 1 and done.stdout.strip() == "my best guess"
    line = one_line(done.stderr)
    assert "no final answer within --max-iterations 1" in line and "raise --max-iterations" in line
    assert ": \n" not in line


def test_a_missing_key_is_explained_in_flags_and_variables(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    done = run_rlm(["ask", "-c", "a.txt", "q"], {**env, "RLM_MODEL": "gpt-5-mini"}, tmp_path)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "OPENAI_API_KEY" in line and "--base-url" in line and "OPENAI_BASE_URL" in line
    assert "backend_kwargs" not in line
    anthropic = run_rlm(
        ["ask", "-c", "a.txt", "--backend", "anthropic", "q"], {**env, "RLM_MODEL": "claude-x"}, tmp_path
    )
    assert anthropic.returncode == 2 and "set ANTHROPIC_API_KEY" in one_line(anthropic.stderr)
    assert "backend_kwargs" not in anthropic.stderr


@pytest.mark.parametrize(("content", "what"), [("", "is empty"), ("  \n\n", "holds only whitespace")])
def test_an_empty_file_is_named_with_the_flag(
    fake_server: FakeOpenAIServer, tmp_path: Path, content: str, what: str
) -> None:
    (tmp_path / "empty.txt").write_text(content)
    done = run_rlm(["ask", "-c", "empty.txt", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"the file 'empty.txt' {what}: give --context a file with text in it" in line
    assert "empty string" not in line and "characters of whitespace" not in line
    assert fake_server.counters.requests == 0


def test_long_errors_are_not_wrapped_when_stderr_is_a_pipe(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    name = "a-file-name-long-enough-that-a-console-of-eighty-columns-would-wrap-the-message-" + "x" * 60 + ".txt"
    done = run_rlm(["ask", "-c", name, "q"], {**server_env(fake_server), "COLUMNS": "80"}, tmp_path)
    assert done.returncode == 2
    assert f"no such file or folder: '{name}'" in one_line(done.stderr)


def test_numeric_flags_are_checked_by_the_cli(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    done = run_rlm(["ask", "-c", "a.txt", "--max-iterations", "0", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2
    assert "argument --max-iterations: 0 is below the minimum of 1" in done.stderr


def test_eval_help_shows_its_defaults_and_the_same_backend_help_as_ask(tmp_path: Path) -> None:
    env = dict(os.environ)
    eval_help = " ".join(run_rlm(["eval", "--help"], env, tmp_path).stdout.split())
    ask_help = " ".join(run_rlm(["ask", "--help"], env, tmp_path).stdout.split())
    assert "default: the paper's for the task" in eval_help and "(default: direct,rlm)" in eval_help

    def backend_help(text: str) -> str:
        options = text.split("options:", 1)[1]  # past the usage line, which also names --backend
        return options.split("--backend {", 1)[1].split(" --base-url", 1)[0]

    assert backend_help(eval_help) == backend_help(ask_help)
    assert "anthropic" in backend_help(ask_help) and "openrouter" in backend_help(ask_help)


def test_eval_without_a_key_says_which_variable_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    done = run_rlm(["eval", "sniah", "--n", "1", "--lengths", "8k"], {**env, "RLM_MODEL": "gpt-5-mini"}, tmp_path)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line.startswith("rlm eval: no OpenAI API key: set OPENAI_API_KEY") and "backend_kwargs" not in line
    assert not (tmp_path / "rlm-eval").exists()


def test_progress_clock_ticks_during_a_model_call_with_no_events(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    console = Console(file=io.StringIO(), width=200)
    status = Status("", console=console)
    line = ask.ProgressLine(status, max_iterations=30)
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


def test_e2b_without_a_key_names_the_variable_not_environment_kwargs(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("x")
    env = {k: v for k, v in server_env(fake_server).items() if k != "E2B_API_KEY"}
    done = run_rlm(["ask", "-c", "a.txt", "--environment", "e2b", "q"], env, tmp_path)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert "set E2B_API_KEY" in line and "environment_kwargs" not in line
    assert fake_server.counters.requests == 0


@pytest.mark.slow
def test_a_run_past_its_timeout_names_the_flag(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    fake_server.root = ["```repl\nprint(1)\n```", "FINAL(late)"]
    fake_server.latency = 5.0  # every model call outlasts the run's wall-clock limit
    done = run_rlm(["ask", "-c", "a.txt", "--timeout", "0.5", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "the run reached --timeout 0.5 s" in line and "finish_reason='timeout'" in line


def test_the_run_timeout_flag_is_the_runs_wall_clock_and_is_named_as_given(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """``--run-timeout`` is the one name (``--timeout`` its older one); the message names the flag used."""
    (tmp_path / "a.txt").write_text("x")
    fake_server.root = ["```repl\nprint(1)\n```", "FINAL(late)"]
    fake_server.latency = 5.0
    done = run_rlm(["ask", "-c", "a.txt", "--run-timeout", "0.5", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 1
    assert "the run reached --run-timeout 0.5 s" in one_line(done.stderr)


@pytest.mark.slow
def test_context_preview_chars_is_a_flag_of_ask(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    """The option's flag comes from its declaration: ``--context-preview-chars 0`` keeps the text from the root."""
    (tmp_path / "a.txt").write_text("TOPSECRET-7431 " + "filler " * 100)
    firsts: list[str] = []

    def root(messages: list[dict[str, Any]]) -> str:
        firsts.append(str(messages[1]["content"]))
        return "FINAL(done)"

    fake_server.root = root
    for flags in (["--context-preview-chars", "0"], []):
        done = run_rlm(["ask", "-c", "a.txt", *flags, "q"], server_env(fake_server), tmp_path)
        assert done.returncode == 0, done.stderr
    hidden, default = firsts
    assert "TOPSECRET" not in hidden and "<preview>" not in hidden and "TOPSECRET" in default
    bad = run_rlm(["ask", "-c", "a.txt", "--context-preview-chars", "-3", "q"], server_env(fake_server), tmp_path)
    assert bad.returncode == 2 and "--context-preview-chars: -3 is below the minimum of 0" in bad.stderr
