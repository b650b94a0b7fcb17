"""Running one cell in an out-of-process worker, with the restart rules every such sandbox shares.

A cell past its wall-time limit, or a worker that dies during a cell, ends with the worker restarted
(context reloaded, variables lost) and a message that says so; the sandboxes differ only in how they
restart a worker and how they learn why it ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from rlm_adapters.core.sandbox.base import CellResult
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.errors import SandboxError

LOST = "the REPL was restarted and your variables were lost (`context` is still loaded)"


def cell_limit(timeout: float | None, cell_timeout: float | None) -> float | None:
    """The tighter of the run's remaining time and the sandbox's per-cell wall limit."""
    return min((t for t in (timeout, cell_timeout) if t is not None), default=None)


async def run_cell(
    channel: HostChannel | None,
    code: str,
    limit: float | None,
    *,
    restart: Callable[[], Awaitable[None]],
    how_it_ended: Callable[[], Awaitable[str]],
    gone: tuple[type[BaseException], ...] = (WorkerGone,),
) -> CellResult:
    """Run `code` through `channel`; restart the worker on a timeout or when it dies mid-cell.

    Args:
        channel: The started worker's channel (None when the sandbox is not started).
        code: The cell.
        limit: Wall seconds for the cell, or None.
        restart: Kills the worker and starts a fresh one with the context loaded.
        how_it_ended: Words for how the worker ended (e.g. "was killed by SIGKILL").
        gone: The exceptions that mean the worker's stream ended.
    """
    if channel is None:
        raise SandboxError("the sandbox is not started (or was closed)")
    started = time.perf_counter()
    try:
        message = await asyncio.wait_for(channel.execute(code), limit)
    except TimeoutError:
        await restart()
        return CellResult(
            output="",
            error=f"the cell ran past its wall time limit of {limit:g} s (limit: cell_timeout) and was stopped; {LOST}",
            duration=time.perf_counter() - started,
            timed_out=True,
            variables_lost=True,
        )
    except gone:
        how = await how_it_ended()
        await restart()
        return CellResult(
            output="",
            error=f"the sandbox worker {how} during this cell; {LOST}",
            duration=time.perf_counter() - started,
            variables_lost=True,
        )
    return CellResult.from_message(message)
