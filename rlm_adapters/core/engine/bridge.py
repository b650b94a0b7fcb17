"""Sync calls into async code, one call at a time: run a coroutine, or iterate an async iterator, from a plain call.

Both work in plain sync code and inside a running event loop (Jupyter, an async framework calling sync
code), where the work gets a `LoopThread` of its own (`core/engine/loop_thread.py`, as every loop on another
thread). The caller's context variables (tracing spans, LangChain's run managers) follow the work onto that
thread. Each call's loop ends with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, TypeVar

from rlm_adapters.core.engine.loop_thread import LoopThread, LoopWork

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Inside a running loop (Jupyter, an async framework calling sync code): a loop on a thread of its own.
    thread = LoopThread("rlm-sync")
    try:
        return thread.submit(coroutine).result()
    finally:
        thread.stop()  # (interrupted meanwhile: the coroutine is cancelled, and has ended when this returns)


def iter_sync(items: AsyncIterator[T]) -> Generator[T, None, None]:
    """Iterate `items` from sync code: it runs at once on a loop of its own thread, its items arrive in order.

    Leaving the loop early (or closing the iterator) cancels `items` on its thread and waits for it, so
    that a run it drives has closed its sandbox by then. The thread is not a daemon: a run still in
    flight at interpreter exit finishes and cleans up instead of being cut off.

    Args:
        items: An async iterator not yet started (an async generator, `RunHandle.events()`, ...).

    Raises:
        BaseException: Whatever `items` raised, re-raised in the caller's thread.
    """
    work = LoopWork.on_new_thread(_pump(items), "rlm-sync-iter")
    return _drain(work)


def _pump(items: AsyncIterator[T]) -> Callable[[Callable[[T], None], asyncio.Event], Coroutine[Any, Any, None]]:
    async def pump(put: Callable[[T], None], _stop: asyncio.Event) -> None:
        async for item in items:
            put(item)

    return pump


def _drain(work: LoopWork[T, None]) -> Generator[T, None, None]:
    try:
        yield from work.iter_items()
        work.wait()  # re-raises what `items` raised
    finally:
        work.close()  # left early: `items` is cancelled on its thread, and has ended when this returns


__all__ = ["iter_sync", "run_sync"]
