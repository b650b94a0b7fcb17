"""`rlm ask --cache`: a run killed part-way is run again and pays only for what had not come back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer, kill_when, second_batch

RLM_BIN = shutil.which("rlm")
pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")


def env_for(server: LedgerServer, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    return {**clean, "RLM_MODEL": "root-model", "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "t", **extra}


def ask(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    assert RLM_BIN is not None
    return subprocess.run([RLM_BIN, "ask", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


@pytest.fixture
def server() -> LedgerServer:
    with LedgerServer(root=BATCHES, latency=0.3) as running:
        yield running


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_a_killed_run_resumes_without_repeating_a_call_that_came_back(server: LedgerServer, tmp_path: Path) -> None:
    assert RLM_BIN is not None
    (tmp_path / "notes.txt").write_text("a long document\n" * 100)
    command = [RLM_BIN, "ask", "-c", "notes.txt", "--cache", "calls.sqlite", "-q", "Add up the magic numbers."]
    # The default sandbox (subprocess), killed with its process group while the second batch is in flight.
    priced = env_for(server, RLM_MODEL="gpt-5")  # a model with a list price: the note gives a figure
    first = subprocess.Popen(command, cwd=tmp_path, env=priced, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    answered = kill_when(server, first, second_batch)
    assert first.returncode == -9 and first.stdout is not None and first.stdout.read() == ""
    assert len(answered) == 8  # the first root turn, its six sub-calls, the second root turn

    server.forget()
    resumed = ask(["-c", "notes.txt", "--cache", "calls.sqlite", "-q", "Add up the magic numbers."],
                  priced, tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == BATCHES_ANSWER
    assert not set(server.arrived) & set(answered), "a call that had come back before the kill was paid again"
    assert len(server.arrived) == 7  # the six sub-calls cut off by the kill, and the last root turn
    # Said once on stderr, on a pipe and with -q (issue 37): how many calls came from the cache, what they cost.
    [line] = [line for line in resumed.stderr.splitlines() if "resumed" in line]
    head = "rlm: resumed: 8 of 15 model calls from calls.sqlite, $"
    assert line.startswith(head) and line.endswith(" not paid again"), line
    saved = float(line[len(head) :].split()[0])

    server.forget()
    third = ask(["-c", "notes.txt", "--cache", "calls.sqlite", "--json", "Add up the magic numbers."],
                priced, tmp_path)  # fmt: skip
    assert third.returncode == 0 and server.arrived == []
    answer = json.loads(third.stdout)
    usage = answer["usage"]["total"]
    assert usage["cached_calls"] == usage["calls"] == 15 and usage["cost"] == 0.0
    # The 8 calls' figure is part of what all 15 had cost, at gpt-5's list price.
    assert 0 < saved < answer["metadata"]["replayed_cost"], (saved, answer["metadata"])


@pytest.mark.slow
def test_rlm_cache_names_the_file_and_no_cache_turns_it_off(server: LedgerServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    server.latency, server.root = 0.0, ["```repl\nprint(len(context))\n```", "FINAL(done)"]
    env = env_for(server, RLM_CACHE=str(tmp_path / "from-env.sqlite"))
    assert ask(["-c", "a.txt", "-q", "q"], env, tmp_path).returncode == 0
    assert (tmp_path / "from-env.sqlite").exists()
    server.forget()
    again = ask(["-c", "a.txt", "-q", "q"], env, tmp_path)
    assert again.returncode == 0 and server.arrived == []
    # Replayed calls of a model with no price are not called free (issue 37).
    assert again.stderr.splitlines() == [
        "rlm: resumed: 2 of 2 model calls from from-env.sqlite, not paid again "
        "(cost unknown: no price for 'root-model')"
    ], again.stderr
    assert ask(["-c", "a.txt", "-q", "--no-cache", "q"], env, tmp_path).returncode == 0
    assert len(server.arrived) == 2


@pytest.mark.slow
def test_a_file_that_is_not_a_cache_is_refused_in_one_line_and_left_alone(server: LedgerServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "thesis.tex").write_text("\\documentclass{article}\n")
    done = ask(["-c", "a.txt", "--cache", "thesis.tex", "q"], env_for(server), tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert (
        done.stderr.startswith("rlm ask: --cache ") and "thesis.tex' is not an rlm-adapters call cache" in done.stderr
    )
    assert "give another file" in done.stderr
    assert (tmp_path / "thesis.tex").read_text() == "\\documentclass{article}\n"
    assert server.arrived == []
    from_env = ask(["-c", "a.txt", "q"], env_for(server, RLM_CACHE="thesis.tex"), tmp_path)
    assert from_env.returncode == 2 and from_env.stderr.startswith("rlm ask: RLM_CACHE ")
    both = ask(["-c", "a.txt", "--cache", "c.sqlite", "--no-cache", "q"], env_for(server), tmp_path)
    assert both.returncode == 2 and "--cache and --no-cache" in both.stderr


def test_the_cache_holds_replies_but_no_key_header_or_variable(server: LedgerServer, tmp_path: Path) -> None:
    secret, variable = "sk-planted-4b1d7e0c9a", "SECRET-VARIABLE-77c1e"
    (tmp_path / "a.txt").write_text("x")
    server.latency, server.root = 0.0, ["```repl\nprint(len(context))\n```", "FINAL(done)"]
    env = env_for(server, OPENAI_API_KEY=secret, SOME_TOKEN=variable)
    done = ask(["-c", "a.txt", "--cache", "calls.sqlite", "-q", "q"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    held = b"".join(p.read_bytes() for p in tmp_path.glob("calls.sqlite*"))
    assert b"FINAL(done)" in held  # the replies are there: the file was read, not just opened
    assert secret.encode() not in held and variable.encode() not in held
    assert b"authorization" not in held.lower() and b"bearer" not in held.lower()
    assert sys.platform != "linux" or oct((tmp_path / "calls.sqlite").stat().st_mode & 0o777) == "0o600"
