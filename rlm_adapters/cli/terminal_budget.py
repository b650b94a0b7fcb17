"""``rlm ask`` on a terminal: a limit about to stop the run asks on stderr whether to allow more.

    rlm: the run reached --max-cost $1.00 after 40 of 60 sub-calls; allow $2.00? [y/N/amount]

``y`` allows the amount shown (twice the limit), a number allows that much, anything else (or Enter, or
end of input) stops the run as it would have stopped without asking. The answer is read without blocking
the run's event loop, so the calls in flight keep coming back while the question waits; the progress line
is paused meanwhile. It is used only when stdin and stderr are both a terminal (`wanted`).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Callable
from typing import TextIO

from rlm_adapters.core.adapter_kit import EventTally, limit_amount

# How each raisable limit is named to the user: the flag when `rlm ask` has one.
LABELS = {
    "max_cost": "--max-cost",
    "max_iterations": "--max-iterations",
    "max_sub_calls": "max_sub_calls",
    "max_root_tokens": "max_root_tokens",
    "max_sub_tokens": "max_sub_tokens",
}
ATTEMPTS = 3
_NUMBER = re.compile(r"^\$?\s*([0-9][0-9_,]*(?:\.[0-9]*)?|\.[0-9]+)$")


def wanted(stdin: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """True when someone can answer: stdin and stderr are both a terminal."""
    stdin, stderr = stdin or sys.stdin, stderr or sys.stderr
    try:
        return stdin.isatty() and stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def parse_answer(text: str, name: str, limit: float) -> tuple[float | None, str | None]:
    """``(new limit or None, a complaint to ask again with, or None)`` for one line the user typed."""
    answer = text.strip().lower()
    if answer in ("", "n", "no"):
        return None, None
    if answer in ("y", "yes"):
        return limit * 2, None
    match = _NUMBER.match(answer)
    if match is None:
        return None, "answer y, n or a number"
    value = float(match.group(1).replace(",", "").replace("_", ""))
    if value <= limit:
        return None, f"give a number above {limit_amount(name, limit)}"
    return value, None


class TerminalBudgetPrompt:
    """An `on_budget` hook that asks the person at the terminal.

    Args:
        tally: The run's counts (the question says how many sub-calls came back of how many sent).
        pause: Called with True before the question is shown and False after (the progress line).
        stdin: Where the answer is read (a terminal).
        stderr: Where the question goes.
    """

    def __init__(
        self,
        tally: EventTally,
        pause: Callable[[bool], None] | None = None,
        *,
        stdin: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.tally = tally
        self.pause = pause
        self.stdin = stdin
        self.stderr = stderr  # None: sys.stderr as it is once the progress line is paused (rich swaps it while live)

    def question(self, name: str, limit: float) -> str:
        """The question for a limit `name` reached at `limit`."""
        tally = self.tally
        calls = ""
        if tally.sub_calls_started:
            calls = f" after {tally.sub_calls_finished} of {tally.sub_calls_started} sub-calls"
        reached = f"{LABELS.get(name, name)} {limit_amount(name, limit)}"
        return f"rlm: the run reached {reached}{calls}; allow {limit_amount(name, limit * 2)}? [y/N/amount] "

    async def __call__(self, name: str, used: float, limit: float) -> float | None:
        """Ask; the new limit, or None to stop the run."""
        if self.pause is not None:
            self.pause(True)
        try:
            out, prompt = self.stderr or sys.stderr, self.question(name, limit)
            for _ in range(ATTEMPTS):
                out.write(prompt)
                out.flush()
                line = await read_line(self.stdin or sys.stdin)
                if line is None:  # end of input: nobody will answer
                    out.write("\n")
                    return None
                value, complaint = parse_answer(line, name, limit)
                if complaint is None:
                    return value
                prompt = f"rlm: {complaint}: "
            return None
        finally:
            if self.pause is not None:
                self.pause(False)


async def read_line(stream: TextIO) -> str | None:
    """One line from `stream` without blocking the event loop (None at end of input)."""
    loop = asyncio.get_running_loop()
    fd = stream.fileno()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    data = os.read(fd, 4096)  # a terminal in line mode hands over one line at a time
    return None if not data else data.decode(errors="replace")
