"""``rlm ask`` prints the answer the moment it exists, before its sources are found.

`AnswerFirst` is a run observer (`rlm_adapters.core.Observer`): the engine tells it the answer exists before
any observer is asked to finish, so the answer is on stdout while the sources are still being found (the
progress line says "finding sources"). Ctrl-C or SIGTERM (``timeout 300 rlm ask ...``) in that phase stops
only the sources: the answer stays printed, and the sources block says in one line that they were not
finished. Before the answer exists, both stop the run as they always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from rlm_adapters.cli._ask_output import print_answer, write_text
from rlm_adapters.cli._status_line import StatusLine
from rlm_adapters.core import AnswerDelta, Event, Observer, RLMResult
from rlm_adapters.core.adapter_kit import INTERRUPTED

FINDING = "finding sources"
__all__ = ["FINDING", "INTERRUPTED", "SIGINT_CODE", "SIGTERM_CODE", "AnswerFirst"]
SIGINT_CODE = 130
SIGTERM_CODE = 143


class AnswerFirst(Observer):
    """Prints the answer (`show`) once it exists, and keeps the result for a sources phase cut short.

    Args:
        show: Print the answer when it exists (False for ``--json`` and a typed answer: printed whole after).
        raw: ``--raw``: the answer's characters as they are.
        status: The live progress line, when there is one (paused while the answer is printed).
        stream: Print the answer's pieces as the model writes them (the direct route's), then the rest of it
            once it exists (False for ``--json`` and a typed answer).
        finding: Sources are found once the answer exists (the progress line says so meanwhile).
    """

    name = "answer"

    def __init__(
        self, *, show: bool, raw: bool, status: StatusLine | None, stream: bool = False, finding: bool = True
    ) -> None:
        self.show = show
        self.finding = finding
        self.raw = raw
        self.status = status
        self.stream = stream
        self.streamed: list[str] = []  # joined once the answer exists: a reply is thousands of pieces
        self.result: RLMResult | None = None
        self.printed = False
        self.code = SIGINT_CODE  # the exit status if the sources phase is stopped: SIGINT's unless SIGTERM came

    def event(self, event: Event) -> None:
        """Print a piece of the answer as it arrives (the progress line paused until the answer is whole)."""
        if self.stream and isinstance(event, AnswerDelta):
            if self.status is not None and not self.streamed:
                self.status.pause(True)
            write_text(event.text, raw=self.raw)
            self.streamed.append(event.text)

    async def answered(self, result: RLMResult) -> None:
        """Print the answer now (the rest of it, when it streamed); from here a SIGTERM stops only the sources."""
        self.result = result
        if self.streamed:
            # What was printed stays; the rest follows (nothing, if the answer is not what streamed).
            streamed = "".join(self.streamed)
            rest = result.response[len(streamed) :] if result.response.startswith(streamed) else ""
            write_text(rest + "\n", raw=self.raw)
            self.printed = True
            if self.status is not None and self.finding:
                self.status.update(FINDING)
                self.status.pause(False)
        elif self.show and result.response:
            if self.status is not None:
                self.status.pause(True)
            print_answer(result, sources=False, raw=self.raw)
            sys.stdout.flush()
            self.printed = True
            if self.status is not None:
                self.status.update(FINDING)
                self.status.pause(False)
        elif self.status is not None and self.finding:
            self.status.update(FINDING)
        task = asyncio.current_task()
        if task is not None and self.finding:  # a SIGTERM from here on stops only the sources phase
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # no signals off the main thread
                asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self._terminated, task)

    def _terminated(self, task: asyncio.Task[object]) -> None:
        self.code = SIGTERM_CODE
        task.cancel()
