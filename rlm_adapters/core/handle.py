"""`RunHandle`: one run started in the background, with its events as a stream, its result and a stop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from rlm_adapters.core.events import Callback, Event
from rlm_adapters.core.result import RLMResult


class RunHandle:
    """A run started with `RLM.start`: its events as they happen, its result, and a way to stop it.

    Args:
        run: Starts the run, given a callback for its events and the event that cancels it.
        cancel_event: The run's cancel event (a fresh one when None).
    """

    def __init__(
        self,
        run: Callable[[Callback, asyncio.Event], Coroutine[Any, Any, RLMResult]],
        cancel_event: asyncio.Event | None = None,
    ) -> None:
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._cancel = cancel_event if cancel_event is not None else asyncio.Event()
        self._task = asyncio.create_task(run(self._queue.put, self._cancel))

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the run (and of its nested runs) in order, ending when the run ends.

        The last one is the top-level `RunFinished`. One consumer at a time; a failure of the run is
        raised by `result`, not here.
        """
        while not (self._task.done() and self._queue.empty()):
            if not self._queue.empty():
                yield self._queue.get_nowait()
                continue
            getter = asyncio.ensure_future(self._queue.get())
            try:
                await asyncio.wait({getter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()  # Queue.get leaves an item it did not take in the queue
            if getter.done() and not getter.cancelled():
                yield getter.result()

    async def result(self) -> RLMResult:
        """Wait for the run and return its result (re-raising what ended it, if it failed)."""
        return await self._task

    def cancel(self) -> None:
        """Stop the run: it closes its sandbox and `result` returns ``finish_reason="cancelled"``."""
        self._cancel.set()

    def done(self) -> bool:
        """True once the run has ended."""
        return self._task.done()

    async def aclose(self) -> None:
        """Stop the run at once if it is still going, and wait until it has closed its sandbox."""
        if self._task.done():
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


__all__ = ["RunHandle"]
