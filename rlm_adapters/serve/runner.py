"""One run of `rlm serve` on a thread of its own, with its own event loop, read from the server's loop.

The server's event loop only reads requests and writes responses. Each run gets a thread and a loop (a
`RunHandle` on a new thread, as ChatRLM's sync calls get), so that whatever one run does on its loop (reading
its conversation from the request's bytes, describing a 3 MB context, finding its sources, a slow callback)
never delays another client's request. Its sources are found there too (`rlm_adapters.sources.SourceTracker`,
the run's observer, as every adapter finds them). The handle's `events` are read on the server's loop;
`cancel` stops the run (it closes its sandbox and ends with ``finish_reason="cancelled"``), and `result`
waits until the thread has finished, sandbox closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from rlm_adapters.core import RLM, Callback, RLMResult, RunHandle
from rlm_adapters.sources import SourceTracker


def start_run(rlm: RLM, make_input: Callable[[], tuple[Any, str, dict[str, Any]]], **kwargs: Any) -> RunHandle:
    """Start ``rlm.acompletion`` on a new thread's loop; read it from the calling loop.

    Args:
        rlm: The engine of this run (closed when the run ends).
        make_input: Makes the run's context (its sources are lines of it), question and other
            `RLM.acompletion` keywords of the input (the conversation, for the direct route), on the run's thread;
            what it raises is what `RunHandle.result` raises.
        **kwargs: `RLM.acompletion`'s other keyword arguments.
    """

    async def run(put: Callback, cancel: asyncio.Event) -> RLMResult:
        try:
            context, query, given = make_input()
            # The lines of the conversation its answer rests on, found within the run's sources_timeout.
            tracker = SourceTracker(context, max_output_chars=rlm.max_output_chars)
            running = rlm.acompletion(
                context, query, observers=[tracker], callbacks=[put], cancel_event=cancel, **kwargs, **given
            )
            del context  # the run and the tracker hold what they need of it
            return await running
        finally:
            await asyncio.to_thread(rlm.close)

    return RunHandle.on_new_thread(run, "rlm-serve-run")


async def stop(run: RunHandle) -> None:
    """Cancel the run and wait until its sandbox is closed (for a client that went away, or a server stopping)."""
    run.cancel()
    with contextlib.suppress(BaseException):
        await run.result()
