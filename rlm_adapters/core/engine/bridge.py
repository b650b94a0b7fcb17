"""Sync calls into async code, one call at a time: run a coroutine, or iterate an async iterator, from a plain call.

Both work in plain sync code and inside a running event loop (Jupyter, an async framework calling sync
code), where the work gets a private thread with its own loop. The caller's context variables (tracing
spans, LangChain's run managers) follow the work onto that thread. Each call's loop ends with it; a persistent
session, whose sandbox outlives the call, keeps a loop of its own instead (`core/engine/session.py:SessionLoop`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Inside a running loop (Jupyter, an async framework calling sync code): use a private thread.
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlm-sync") as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()


def iter_sync(items: AsyncIterator[T]) -> Generator[T, None, None]:
    """Iterate `items` from sync code: it runs at once on a private thread, its items arrive in order.

    Leaving the loop early (or closing the iterator) cancels `items` on its thread and waits for it, so
    that a run it drives has closed its sandbox by then. The thread is not a daemon: a run still in
    flight at interpreter exit finishes and cleans up instead of being cut off.

    Args:
        items: An async iterator not yet started (an async generator, `RunHandle.events()`, ...).

    Raises:
        BaseException: Whatever `items` raised, re-raised in the caller's thread.
    """
    pump = _Pump(items)
    thread = threading.Thread(target=pump.serve, args=(contextvars.copy_context(),), name="rlm-sync-iter")
    thread.start()
    return _drain(pump, thread)


class _Pump:
    """Drives an async iterator on its own loop and hands its items over a thread-safe queue."""

    def __init__(self, items: AsyncIterator[Any]) -> None:
        self.items = items
        self.out: queue.Queue[tuple[bool, Any]] = queue.Queue()  # (is_item, item or failure or None)
        self.started = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[None] | None = None

    def serve(self, context: contextvars.Context) -> None:
        with asyncio.Runner() as runner:
            runner.run(self._run(), context=context)

    async def _run(self) -> None:
        self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        self.started.set()
        try:
            async for item in self.items:
                self.out.put((True, item))
        except BaseException as exc:  # cancelled by the consumer, or a failure to hand over
            self.out.put((False, exc))
        else:
            self.out.put((False, None))

    def cancel(self) -> None:
        self.started.wait()
        assert self.loop is not None and self.task is not None
        # The loop may be closing on its own meanwhile: then the work has ended, nothing to cancel.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.task.cancel)


def _drain(pump: _Pump, thread: threading.Thread) -> Generator[Any, None, None]:
    finished = False
    try:
        while True:
            is_item, value = pump.out.get()
            if is_item:
                yield value
                continue
            finished = True
            if value is not None:
                raise value
            return
    finally:
        if not finished:
            pump.cancel()
        thread.join()


__all__ = ["iter_sync", "run_sync"]
