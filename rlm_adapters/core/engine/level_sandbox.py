"""One run level's sandbox: started behind the first root call, runs each reply's code, then closed or kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import rlm_adapters.core.engine.prompts as prompts
from rlm_adapters.core.context import RunContext
from rlm_adapters.core.engine.parsing import QuoteCheck, final_text, find_code_blocks, find_final_in_text
from rlm_adapters.core.engine.session import Session
from rlm_adapters.core.engine.tool_turn import TurnCalls
from rlm_adapters.core.engine.tree import RunTree
from rlm_adapters.core.events import CellExecuted
from rlm_adapters.core.lm import Message
from rlm_adapters.core.sandbox import CellResult, FinalAnswer, Sandbox, SandboxSetup


class LevelSandbox:
    """The sandbox of one `RunLevel`: its background start, the cells of each reply, its close or release."""

    def __init__(
        self,
        tree: RunTree,
        sandbox: Sandbox,
        *,
        context: RunContext,
        session: Session | None,
        turn: TurnCalls | None,
        on_cell: Callable[[CellResult], None],
        ids: dict[str, Any],
        is_quoted: QuoteCheck,
    ) -> None:
        self.tree = tree
        self.sandbox = sandbox
        self.context = context
        self.session = session
        self.turn = turn
        self.on_cell = on_cell  # the loop's record of what each cell did (its error, its output)
        self.ids = ids
        self.is_quoted = is_quoted
        self.variables: dict[str, str] = {}
        self._starting: asyncio.Task[None] | None = None

    def start(self, setup: SandboxSetup) -> None:
        """Start the worker (or the session's next run) in the background, behind the first root call's latency."""
        if self.session is not None:
            self._starting = asyncio.create_task(self.session.begin(self.sandbox, setup))
        else:
            self._starting = asyncio.create_task(self.sandbox.start(setup))

    async def ready(self) -> None:
        """Wait for the worker started in the background; its start-up errors surface here."""
        if self._starting is not None:
            starting, self._starting = self._starting, None
            await starting

    async def close(self) -> None:
        """Let a start still in progress finish (or fail), then close, so that no worker is left behind."""
        if self._starting is not None:
            starting, self._starting = self._starting, None
            await asyncio.gather(starting, return_exceptions=True)
        await self.sandbox.aclose()

    async def release(self, session: Session, messages: list[Message], broken: bool) -> None:
        """Keep the session's sandbox (with this conversation as ``history_N``) unless the run broke it."""
        if self._starting is not None:
            starting, self._starting = self._starting, None
            outcome = await asyncio.gather(starting, return_exceptions=True)
            broken = broken or isinstance(outcome[0], BaseException)
        await session.finish(messages or None, broken)

    async def run_blocks(self, reply: str, iteration: int) -> tuple[list[str], FinalAnswer | None]:
        """Run the reply's code blocks in order (the loop's turn `iteration`), then look for a final answer
        written as text."""
        feedback: list[str] = []
        for index, code in enumerate(find_code_blocks(reply, self.tree.settings.code_fences), start=1):
            cell = await self.execute(code, index, iteration)
            if cell.final is not None:
                return feedback, cell.final
            feedback.append(self.cell_feedback(cell, index))
            if self.tree.budget.exhausted is not None:
                raise self.tree.budget.exhausted
            if self.turn is not None and self.turn.made:
                return feedback, None  # a call of the caller's tools ends the turn after its cell
        text_final = find_final_in_text(reply, self.is_quoted)
        if text_final is None:
            if find_final_in_text(reply) is not None:
                feedback.append(prompts.QUOTED_FINAL)
            return feedback, None
        if text_final.kind == "FINAL":
            return feedback, FinalAnswer(final_text(text_final.argument))
        name = text_final.argument.strip().strip("'\"")
        cell = await self.execute(f"FINAL_VAR({name!r})", len(feedback) + 1, iteration)
        if cell.final is not None:
            return feedback, cell.final
        feedback.append(self.cell_feedback(cell, len(feedback) + 1))
        return feedback, None

    async def execute(self, code: str, index: int, iteration: int) -> CellResult:
        """Run one cell (once the worker is up), hand it to `on_cell`, and emit it."""
        await self.ready()
        self.tree.budget.check_time()
        if self.turn is not None:
            self.turn.accepting = True
        try:
            cell = await self.sandbox.execute(code, self.tree.budget.remaining_time())
        finally:
            if self.turn is not None:
                self.turn.accepting = False
        if cell.variables_lost and self.session is not None:
            # The worker restarted with the session's first context only: hand it this run's again.
            await self.session.reload(self.context.value)
        self.variables = cell.variables
        self.on_cell(cell)
        await self.tree.bus.emit(
            CellExecuted(
                **self.ids,
                iteration=iteration,
                index=index,
                code=code,
                output=cell.output,
                error=cell.error,
                duration=cell.duration,
                timed_out=cell.timed_out,
                variables_lost=cell.variables_lost,
                final=cell.final is not None,
            )
        )
        if cell.timed_out:
            self.tree.budget.check_time()
        return cell

    def cell_feedback(self, cell: CellResult, index: int) -> str:
        """What the model reads of one cell: its output and error, cut to `max_output_chars`."""
        notes = []
        if cell.variables_lost:
            notes.append("[the REPL was restarted: your variables are gone; `context` is still loaded]")
        limit = self.tree.settings.max_output_chars
        output = prompts.truncate_output(cell.output, limit, cell.output_chars)
        # Exception text can quote the context (a KeyError over it): shown within the same limit as output.
        error = None if cell.error is None else prompts.truncate_output(cell.error, limit)
        return prompts.cell_feedback(index, output, error, notes)
