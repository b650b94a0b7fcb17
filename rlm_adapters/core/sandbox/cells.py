"""Running one cell in an out-of-process worker, with the restart rules every such sandbox shares.

A cell past its wall-time limit, or a worker that dies during a cell, ends with the worker restarted
(context reloaded, variables lost) and a message that says so; the sandboxes differ only in how they
restart a worker and how they learn why it ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rlm_adapters.core.sandbox.base import CellResult, FinalAnswer, SandboxSetup
from rlm_adapters.core.sandbox.cell_clock import watch
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone, WorkerMisbehaved
from rlm_adapters.core.sandbox.limits import WorkerLimits, explain_limits
from rlm_adapters.errors import SandboxError

LOST = "the REPL was restarted and your variables were lost (`context` is still loaded)"


def init_message(
    setup: SandboxSetup, context_path: str, limits: WorkerLimits, *, processes: bool = False, shared: bool = False
) -> dict[str, Any]:
    """The worker's ``init`` frame: where its context is (as the worker sees it), tools, values and limits.

    Args:
        setup: The run's sandbox setup.
        context_path: The context file's path inside the sandbox.
        limits: The worker's limits (it applies memory, file size and CPU time to itself).
        processes: The worker applies the process limit too (where nothing else holds it).
        shared: The file is shared with other runs and read-only behind the walls: an ASCII text context is
            then mapped rather than decoded (``map``), so its text is the shared pages.
    """
    context: dict[str, Any] = {"path": context_path, "format": setup.context.format}
    if shared and isinstance(setup.context.value, str) and setup.context.value.isascii():
        context["map"] = True
    return {
        "context": context,
        "tools": setup.tools,
        "values": setup.values,
        "limits": limits.frame(processes=processes),
        "capture_chars": limits.capture_chars,
    }


# How long a cell past its `cell_timeout` has to stop once interrupted before its worker is killed.
INTERRUPT_GRACE = 5.0


async def run_cell(
    channel: HostChannel | None,
    code: str,
    limit: float | None,
    *,
    restart: Callable[[], Awaitable[None]],
    how_it_ended: Callable[[], Awaitable[str]],
    gone: tuple[type[BaseException], ...] = (WorkerGone,),
    cell_timeout: float | None = None,
) -> CellResult:
    """Run `code` through `channel`; stop it past its time, restart the worker when it dies mid-cell.

    Two clocks: `limit` is the run's remaining wall time (hard: past it the worker is killed); `cell_timeout`
    counts only the time the cell computes, not the time it waits on the host's model calls. Past it the cell
    is interrupted (it raises in its code: what it printed and the variables are kept) and killed only if it
    has not stopped `INTERRUPT_GRACE` seconds later.

    Args:
        channel: The started worker's channel (None when the sandbox is not started).
        code: The cell.
        limit: Wall seconds left for the run, or None.
        restart: Kills the worker and starts a fresh one with the context loaded.
        how_it_ended: Words for how the worker ended (e.g. "was killed by SIGKILL").
        gone: The exceptions that mean the worker's stream ended.
        cell_timeout: Seconds the cell may compute, or None.
    """
    if channel is None:
        raise SandboxError("the sandbox is not started (or was closed)")
    started = time.perf_counter()
    running = asyncio.ensure_future(channel.execute(code))
    try:
        outcome = await watch(running, channel.clock, limit, cell_timeout)
        if outcome == "run_time":
            return await _killed(channel, running, restart, started, f"the run's time ({limit:g} s) ran out")
        if outcome == "cell_timeout":
            return await _interrupted(channel, running, restart, started, cell_timeout)
        return running.result()
    except gone as exc:
        # A final answer announced before the worker died (or misbehaved) still ends the run with it.
        final = channel.cell_final
        if isinstance(exc, WorkerMisbehaved):
            what = f"{exc}; it was stopped"
        else:
            what = f"the sandbox worker {await how_it_ended()}"
        return await _restarted(final, restart, started, f"{what} during this cell; {LOST}")
    finally:
        if not running.done():
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)


async def _interrupted(
    channel: HostChannel,
    running: asyncio.Future[CellResult],
    restart: Callable[[], Awaitable[None]],
    started: float,
    cell_timeout: float | None,
) -> CellResult:
    """Interrupt a cell past its `cell_timeout`; kill its worker if it does not stop in `INTERRUPT_GRACE`."""
    await channel.interrupt()
    done, _ = await asyncio.wait({running}, timeout=INTERRUPT_GRACE)
    if done and running.exception() is None:
        result = running.result()
        result.timed_out = True
        return result
    why = f"it computed past its limit of {cell_timeout:g} s (cell_timeout) and did not stop when interrupted"
    return await _killed(channel, running, restart, started, why)


async def _killed(
    channel: HostChannel,
    running: asyncio.Future[CellResult],
    restart: Callable[[], Awaitable[None]],
    started: float,
    why: str,
) -> CellResult:
    """Stop a cell by killing its worker (`run_cell`'s ``finally`` collects the cell's cancelled wait)."""
    running.cancel()
    error = f"the cell was stopped: {why}; its output was lost and {LOST}"
    return await _restarted(channel.cell_final, restart, started, error, timed_out=True)


async def _restarted(
    final: FinalAnswer | None,
    restart: Callable[[], Awaitable[None]],
    started: float,
    error: str,
    *,
    timed_out: bool = False,
) -> CellResult:
    """Restart the worker after a cell it could not finish; a final answer it announced before is kept."""
    await restart()
    return CellResult(
        output="",
        error=error,
        final=final,
        duration=time.perf_counter() - started,
        timed_out=timed_out,
        variables_lost=True,
    )


class WorkerCells:
    """The ``init`` frame and `execute` of a sandbox that runs the worker program out of process.

    The subprocess, Docker and cloud sandboxes share them. A subclass sets `limits`, `_setup`, `_context_file`
    and `_channel`, says where the context file is as the worker sees it (`_context_path`), and provides
    `_restart` and `_how_it_ended`; the subprocess sandbox builds its own ``init`` frame (with the process
    limit its worker applies).
    """

    limits: WorkerLimits
    _setup: SandboxSetup | None
    _context_file: Path | None
    _channel: HostChannel | None
    _gone: tuple[type[BaseException], ...] = (WorkerGone, OSError)  # what means the worker's stream ended

    def _context_path(self, name: str) -> str:
        """The context file's path as the worker sees it (default: relative to its working folder)."""
        return name

    def _init_message(self) -> dict[str, Any]:
        assert self._setup is not None and self._context_file is not None
        return init_message(self._setup, self._context_path(self._context_file.name), self.limits)

    async def execute(self, code: str, timeout: float | None) -> CellResult:
        """Run a cell; past its time limit the worker is killed and restarted in the same sandbox.

        Between cells the sandbox rests (`_rest`): where the sandbox can stop its processes, nothing a
        cell left behind (a thread, a forked child) runs until the next cell wakes it (`_wake`).
        """
        await self._wake()
        result = await run_cell(
            self._channel,
            code,
            timeout,
            restart=self._restart,
            how_it_ended=self._how_it_ended,
            gone=self._gone,
            cell_timeout=self.limits.cell_timeout,
        )
        await self._rest()
        return explain_limits(result, self.limits)

    async def _wake(self) -> None:
        """Continue what `_rest` stopped, before the next frame is written (default: nothing was stopped)."""

    async def _rest(self) -> None:
        """Stop every process of the sandbox until the next cell (default: the sandbox cannot)."""

    async def _restart(self) -> None:
        raise NotImplementedError

    async def _how_it_ended(self) -> str:
        raise NotImplementedError
