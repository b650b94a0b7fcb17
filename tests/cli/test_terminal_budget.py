"""`rlm ask`'s question on a terminal when a limit is about to stop the run (`rlm_adapters.cli.terminal_budget`)."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rlm_adapters.cli.terminal_budget import TerminalBudgetPrompt, parse_answer, read_line, wanted
from rlm_adapters.core.events import SubCallFinished, SubCallStarted
from rlm_adapters.core.tally import EventTally
from rlm_adapters.testing import FakeOpenAIServer

RLM_BIN = shutil.which("rlm")


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("y\n", (2.0, None)),
        ("YES\n", (2.0, None)),
        ("\n", (None, None)),
        ("n\n", (None, None)),
        ("$3.50\n", (3.5, None)),
        ("2,000\n", (2000.0, None)),
        ("0.5\n", (None, "give a number above $1.00")),
        ("lots\n", (None, "answer y, n or a number")),
    ],
)
def test_answers_are_read_in_the_words_of_the_question(typed: str, expected: tuple[float | None, str | None]) -> None:
    assert parse_answer(typed, "max_cost", 1.0) == expected


def tally_of(finished: int, started: int) -> EventTally:
    tally = EventTally()
    call = {"run_id": "r", "batch_id": "b", "call_kind": "llm_query", "model": "m"}
    for n in range(started):
        tally.add(SubCallStarted(call_id=f"c{n}", batch_size=started, prompt="", **call))
    for n in range(finished):
        done = {"response": "", "error": None, "input_tokens": 0, "output_tokens": 0, "cost": 0, "duration": 0}
        tally.add(SubCallFinished(call_id=f"c{n}", **call, **done))
    return tally


def test_the_question_names_the_flag_the_progress_and_the_offer() -> None:
    prompt = TerminalBudgetPrompt(tally_of(40, 60))
    assert prompt.question("max_cost", 1.0) == (
        "rlm: the run reached --max-cost $1.00 after 40 of 60 sub-calls; allow $2.00? [y/N/amount] "
    )
    assert prompt.question("max_sub_tokens", 1_000_000).startswith(
        "rlm: the run reached max_sub_tokens 1,000,000 after"
    )
    assert "after" not in TerminalBudgetPrompt(EventTally()).question("max_iterations", 30)


def test_nothing_asks_without_a_terminal() -> None:
    assert not wanted(io.StringIO(), io.StringIO())
    primary, secondary = pty.openpty()
    with os.fdopen(secondary, "r", closefd=False) as tty, open(os.devnull, "w") as null:
        assert not wanted(tty, null)  # stderr is not a terminal
        assert wanted(tty, tty)
    os.close(primary)
    os.close(secondary)


async def test_the_prompt_asks_again_after_a_bad_answer_and_pauses_the_progress_line() -> None:
    primary, secondary = pty.openpty()
    tty = os.fdopen(secondary, "r", closefd=False)
    paused: list[bool] = []
    errors = io.StringIO()
    prompt = TerminalBudgetPrompt(tally_of(1, 2), paused.append, stdin=tty, stderr=errors)
    task = asyncio.create_task(prompt("max_cost", 0.4, 1.0))
    os.write(primary, b"0.5\n")
    await asyncio.sleep(0.05)
    assert not task.done()  # asked again: 0.5 is not above the limit
    os.write(primary, b"3\n")
    assert await asyncio.wait_for(task, 5) == 3.0
    assert paused == [True, False]
    assert errors.getvalue().count("rlm: the run reached --max-cost $1.00") == 1
    assert "give a number above $1.00" in errors.getvalue()
    tty.close()
    os.close(primary)
    os.close(secondary)


async def test_reading_the_answer_leaves_the_loop_free() -> None:
    primary, secondary = pty.openpty()
    tty = os.fdopen(secondary, "r", closefd=False)
    reader = asyncio.create_task(read_line(tty))
    ticks = 0
    for _ in range(5):
        await asyncio.sleep(0.01)
        ticks += 1
    os.write(primary, b"y\n")
    assert (await asyncio.wait_for(reader, 5)).strip() == "y" and ticks == 5
    tty.close()
    os.close(primary)
    os.close(secondary)


@pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
def test_rlm_ask_on_a_terminal_asks_and_goes_on_with_more_turns(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    assert RLM_BIN is not None
    (tmp_path / "notes.txt").write_text("the code word is heron\n")
    fake_server.root = ["```repl\nprint(len(context))\n```", "FINAL(heron)"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_"))}
    env.update(RLM_MODEL="root-model", OPENAI_BASE_URL=fake_server.base_url, OPENAI_API_KEY="test", TERM="dumb")
    primary, secondary = pty.openpty()
    command = [RLM_BIN, "ask", "-c", "notes.txt", "--max-iterations", "1", "--environment", "local", "q?"]
    child = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=secondary, stderr=secondary,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 60
    while b"[y/N/amount]" not in seen and time.monotonic() < deadline:
        if not select.select([primary], [], [], 1)[0]:
            continue
        try:
            seen += os.read(primary, 4096)
        except OSError:  # the child closed the terminal
            break
    assert b"the run reached --max-iterations 1; allow 2?" in seen, seen.decode(errors="replace")
    os.write(primary, b"y\n")
    out, _ = child.communicate(timeout=60)
    os.close(primary)
    assert child.returncode == 0 and out.strip() == "heron"
    assert fake_server.counters.root_requests == 2
