"""One run on a thread of its own, with its own event loop, its events handed to the server's loop.

The server's event loop only reads requests and writes responses. Each run gets a thread and a loop (as
`core.bridge.iter_sync` gives sync callers), so that whatever one run does on its loop (reading its
conversation from the request's bytes, describing a 3 MB context, finding its sources, a slow callback)
never delays another client's request. Its sources are found there too (`rlm_adapters.sources.SourceTracker`,
the run's observer, as every adapter finds them). `OffLoopRun.events`
yields the run's events on the server's loop; `cancel` stops the run (it closes its sandbox and ends with
``finish_reason="cancelled"``), and `result` waits until the thread has finished, sandbox closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from rlm_adapters.core import RLM, Event, RLMResult, RunHandle
from rlm_adapters.sources import SourceTracker

_END = object()


class OffLoopRun:
    """Start `rlm.start(*args, **kwargs)` on a new thread's loop; read it from the calling loop.

    Args:
        rlm: The engine of this run (closed when the run ends).
        make_input: Makes the run's context (its sources are lines of it), question and other `RLM.start`
            keywords of the input (the conversation, for the direct route), on the run's thread; what it
            raises is what `result` raises.
        **kwargs: `RLM.start`'s other keyword arguments.
    """

    def __init__(self, rlm: RLM, make_input: Callable[[], tuple[Any, str, dict[str, Any]]], **kwargs: Any) -> None:
        self._rlm = rlm
        self._make_input = make_input
        self._kwargs = kwargs
        self._home = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done: asyncio.Future[RLMResult] = self._home.create_future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: RunHandle | None = None
        self._ready = threading.Event()
        self._cancelled = False
        self._thread = threading.Thread(target=self._serve, name="rlm-serve-run")
        self._thread.start()

    def _serve(self) -> None:
        with asyncio.Runner() as runner:
            runner.run(self._drive())

    async def _drive(self) -> None:
        self._loop = asyncio.get_running_loop()
        outcome: RLMResult | BaseException
        try:
            context, query, given = self._make_input()
            # The lines of the conversation its answer rests on, found within the run's sources_timeout.
            tracker = SourceTracker(context, max_output_chars=self._rlm.max_output_chars)
            self._handle = self._rlm.start(context, query, observers=[tracker], **self._kwargs, **given)
            del context  # the run and the tracker hold what they need of it
            self._ready.set()
            if self._cancelled:
                self._handle.cancel()
            try:
                async for event in self._handle.events():
                    self._hand(self._queue.put_nowait, event)
                outcome = await self._handle.result()
            finally:
                await self._handle.aclose()
        except BaseException as exc:  # handed to the server's loop, raised by `result`
            outcome = exc
        finally:
            self._ready.set()
            await asyncio.to_thread(self._rlm.close)
        self._hand(self._queue.put_nowait, _END)
        self._hand(self._settle, outcome)

    def _settle(self, outcome: RLMResult | BaseException) -> None:
        if self._done.done():
            return
        if isinstance(outcome, BaseException):
            self._done.set_exception(outcome)
        else:
            self._done.set_result(outcome)

    def _hand(self, callback: Callable[[Any], None], item: Any) -> None:
        # The server may be shutting down, its loop closed: the run has nobody left to tell.
        with contextlib.suppress(RuntimeError):
            self._home.call_soon_threadsafe(callback, item)

    async def events(self) -> AsyncIterator[Event]:
        """The run's events as they happen (nested runs' too), ending when the run ends."""
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            yield item

    async def result(self) -> RLMResult:
        """Wait until the run has ended and its sandbox is closed; its result (or what it raised)."""
        return await asyncio.shield(self._done)

    def cancel(self) -> None:
        """Stop the run (its sandbox is closed; the result says ``finish_reason="cancelled"``)."""
        self._cancelled = True
        handle, loop = self._handle, self._loop
        if handle is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # its loop has already ended: so has the run
                loop.call_soon_threadsafe(handle.cancel)

    async def stop(self) -> None:
        """Cancel the run and wait until its sandbox is closed (for a client that went away)."""
        self.cancel()
        with contextlib.suppress(BaseException):
            await self.result()

    def done(self) -> bool:
        """True once the run has ended."""
        return self._done.done()
