"""One run level's sandbox: started behind the first root call, runs each reply's code, then closed or kept.

Whose sandbox it is (the level's own, or a persistent session's kept across runs) is a `SandboxLease`, so the
loop has one path for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import rlm_adapters.core.engine.prompts as prompts
from rlm_adapters.core.context import RunContext
from rlm_adapters.core.engine.parsing import QuoteCheck, final_text, find_final_in_text, scan_blocks
from rlm_adapters.core.engine.tool_turn import TurnCalls
from rlm_adapters.core.engine.tree import RunTree
from rlm_adapters.core.events import CellExecuted
from rlm_adapters.core.lm import Message
from rlm_adapters.core.sandbox import CellResult, FinalAnswer, Sandbox, SandboxSetup, open_sandbox


class SandboxLease(Protocol):
    """Where one run level's code runs, from its start to its end."""

    @property
    def context_alias(self) -> str:
        """What ``context`` names in the REPL: the latest context (``"latest"``) or the first (``"first"``)."""
        ...

    async def acquire(self) -> tuple[Sandbox, tuple[int, int]]:
        """The sandbox, with this run's context number and how many histories the REPL already holds."""
        ...

    def scratch(self) -> Path:
        """The folder for the context file and the model's scratch files."""
        ...

    async def start(self, sandbox: Sandbox, setup: SandboxSetup) -> None:
        """Start the worker for this run (or hand this run's context to one already running)."""
        ...

    async def restarted(self, context: Any) -> None:
        """The worker restarted and lost its variables: give it what this run needs again."""
        ...

    async def end(self, sandbox: Sandbox, messages: list[Message], broken: bool) -> None:
        """After the run: close the sandbox, or keep it (with `messages`, the conversation) unless `broken`."""
        ...

    def describe(self, metadata: dict[str, Any]) -> None:
        """Add what the run's result should say of its sandbox (a session's counts) to `metadata`."""
        ...


class OwnSandbox:
    """A sandbox of the level's own: opened for it, in a scratch folder of the run tree's, closed after."""

    context_alias = "latest"

    def __init__(self, tree: RunTree, run_id: str) -> None:
        self.tree = tree
        self.run_id = run_id

    async def acquire(self) -> tuple[Sandbox, tuple[int, int]]:
        settings = self.tree.settings
        return await open_sandbox(settings.environment, dict(settings.environment_kwargs)), (1, 0)

    def scratch(self) -> Path:
        return self.tree.scratch(self.run_id)

    async def start(self, sandbox: Sandbox, setup: SandboxSetup) -> None:
        await sandbox.start(setup)

    async def restarted(self, context: Any) -> None:
        return None  # the worker reloads its one context itself

    async def end(self, sandbox: Sandbox, messages: list[Message], broken: bool) -> None:
        await sandbox.aclose()

    def describe(self, metadata: dict[str, Any]) -> None:
        return None


class NotOpened(Exception):
    """The level's sandbox could not be opened (`LevelSandbox.open_error` says why): the run cannot go on."""


class LevelSandbox:
    """The sandbox of one `RunLevel`: its background start, the cells of each reply, its close or release."""

    def __init__(
        self,
        tree: RunTree,
        sandbox: Sandbox | None,
        *,
        context: RunContext,
        lease: SandboxLease,
        turn: TurnCalls | None,
        on_cell: Callable[[CellResult], None],
        ids: dict[str, Any],
        is_quoted: QuoteCheck,
    ) -> None:
        self.tree = tree
        self._sandbox = sandbox  # None until `open` has it
        self.context = context
        self.lease = lease
        self.turn = turn
        self.on_cell = on_cell  # the loop's record of what each cell did (its error, its output)
        self.ids = ids
        self.is_quoted = is_quoted
        self.variables: dict[str, str] = {}
        self.last_turn_code: list[str] = []  # the code blocks of the latest turn that ran
        self.lost_names: list[str] = []  # the variables the latest cell's restart took away
        self._starting: asyncio.Task[None] | None = None
        self.open_error: Exception | None = None  # why `open` could not open the sandbox

    @property
    def sandbox(self) -> Sandbox:
        """The level's sandbox (once opened: `execute` waits for it)."""
        if self._sandbox is None:
            raise RuntimeError("the level's sandbox is not open yet")
        return self._sandbox

    def start(self, setup: SandboxSetup) -> None:
        """Start the worker (or the session's next run) in the background, behind the first root call's latency."""
        self._starting = asyncio.create_task(self.lease.start(self.sandbox, setup))

    def open(self, setup: SandboxSetup, announce: Callable[[Sandbox], Awaitable[None]]) -> None:
        """Open the sandbox, `announce` it, then start its worker: all in the background, behind the first
        root call (which needs no sandbox). Opening a level's first sandbox probes its walls (0.2 s, once)."""
        self._starting = asyncio.create_task(self._open(setup, announce))

    async def _open(self, setup: SandboxSetup, announce: Callable[[Sandbox], Awaitable[None]]) -> None:
        try:
            self._sandbox, _ = await self.lease.acquire()
        except Exception as exc:
            self.open_error = exc
            raise NotOpened(str(exc)) from exc
        await announce(self._sandbox)
        await self.lease.start(self._sandbox, setup)

    async def ready(self) -> None:
        """Wait for the worker started in the background; its start-up errors surface here (a sandbox
        that could not be opened as `NotOpened`)."""
        if self._starting is not None:
            starting, self._starting = self._starting, None
            await starting

    async def end(self, messages: list[Message], broken: bool) -> None:
        """Let a start still in progress finish (or fail), so that no worker is left behind, then hand the
        sandbox back to its lease (closed, or kept with this conversation unless the run or its start broke it).
        A sandbox that could not be opened (`open_error`) has nothing to hand back."""
        if self._starting is not None:
            starting, self._starting = self._starting, None
            outcome = (await asyncio.gather(starting, return_exceptions=True))[0]
            broken = broken or isinstance(outcome, BaseException)
        if self._sandbox is not None:
            await self.lease.end(self._sandbox, messages, broken)

    async def run_blocks(
        self, reply: str, iteration: int, *, truncated: bool = False
    ) -> tuple[list[str], FinalAnswer | None]:
        """Run the reply's code blocks in order (the loop's turn `iteration`), then look for a final answer
        written as text.

        What the model is told besides each cell's output comes first: a reply cut at its token cap, and the
        blocks that did not run or ran though unclosed (`fences.scan`). `last_turn_code` keeps the code that ran.

        Args:
            reply: The root model's reply.
            iteration: The turn.
            truncated: The reply was cut at its token cap (an unclosed block at its end never runs).
        """
        blocks = scan_blocks(reply, self.tree.settings.code_fences, truncated=truncated)
        feedback = list(blocks.notes)
        if truncated and not any(b.kind == "unclosed_cut" for b in blocks.blocks):
            feedback.insert(0, prompts.reply_cut(self.tree.settings.max_reply_tokens))
        self.last_turn_code = blocks.code
        for index, code in enumerate(blocks.code, start=1):
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
        if cell.variables_lost:
            await self.lease.restarted(self.context.value)
            self.lost_names = [name for name in self.variables if name != "..."]
        else:
            self.lost_names = []
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
            gone = f" ({', '.join(self.lost_names[:30])})" if self.lost_names else ""
            notes.append(f"[the REPL was restarted: your variables are gone{gone}; `context` is still loaded]")
        limit = self.tree.settings.max_output_chars
        output = prompts.truncate_output(cell.output, limit, cell.output_chars)
        # Exception text can quote the context (a KeyError over it): shown within the same limit as output.
        error = None if cell.error is None else prompts.truncate_output(cell.error, limit)
        return prompts.cell_feedback(index, output, error, notes)
