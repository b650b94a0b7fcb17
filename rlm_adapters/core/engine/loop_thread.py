"""Work on another thread's event loop: `LoopThread` runs the loop, `LoopWork` carries one piece of work across.

Every place that runs async work away from its caller's thread goes through here: the sync bridge
(`core/engine/bridge.py`: `run_sync` inside a running loop, `iter_sync`), a persistent session's loop (where its
sandbox lives), a run of `rlm serve` (off the server's loop) and ChatRLM's sync calls. `LoopWork` is one
coroutine started on a loop (the caller's own, or a `LoopThread`'s), whose items (a run's events), outcome and
stop are reached from any thread, by sync and async callers alike; `core/engine/handle.py:RunHandle` is its typed face
for runs.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Generic, Self, TypeVar

T = TypeVar("T")
R = TypeVar("R")
# Starts a piece of work, given where to put its items and the event that asks it to stop.
Work = Callable[[Callable[[T], None], asyncio.Event], Coroutine[Any, Any, R]]


class LoopThread:
    """An event loop running on a thread of its own until `stop`.

    Args:
        name: The thread's name.
        daemon: A daemon thread (a session's loop, which a dropped RLM's finalizer stops) or not (a run's loop:
            a run in flight at interpreter exit finishes and cleans up instead of being cut off).
    """

    def __init__(self, name: str, *, daemon: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.ended: concurrent.futures.Future[None] = concurrent.futures.Future()  # the thread's last act
        self._stopping = False
        self._stop_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=daemon)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # As `asyncio.run` ends: what is still pending is cancelled and awaited, generators and the
            # default executor's threads are shut down, so nothing of the loop outlives its thread.
            try:
                while pending := asyncio.all_tasks(self.loop):  # (a task may start another while it ends)
                    for task in pending:
                        task.cancel()
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()
                self.ended.set_result(None)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coroutine` on the loop (the caller's context variables go with it)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the loop: at once from the loop's own thread, else soon; not at all once it ended."""
        if self.in_loop():
            callback()
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: what it ran has ended
            self.loop.call_soon_threadsafe(callback)

    def in_loop(self) -> bool:
        """True when called from the loop's own thread."""
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        """Stop the loop (what is still pending on it is cancelled); from another thread, wait until it ended."""
        with self._stop_lock:
            first, self._stopping = not self._stopping, True
        if first:  # once: a second stop would cut short the clean-up the first one started
            with contextlib.suppress(RuntimeError):  # already closed
                self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop():
            self._thread.join()


class Handoff(Generic[T]):
    """Items handed from one thread to another in order, read by a sync or an async consumer.

    Unbounded (the producer never waits for the consumer); a read cancelled while it waits takes nothing.
    """

    def __init__(self) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._closed = False
        self._changed = threading.Condition()
        self._waiters: list[Callable[[], None]] = []

    def put(self, item: T) -> None:
        """Add `item` (from any thread)."""
        with self._changed:
            self._items.append(item)
            self._wake()

    def close(self) -> None:
        """No more items: readers get the rest, then the end."""
        with self._changed:
            self._closed = True
            self._wake()

    def _wake(self) -> None:
        self._changed.notify_all()
        waiters, self._waiters = self._waiters, []
        for wake in waiters:
            wake()

    def take(self) -> tuple[bool, T | None]:
        """Wait for the next item in this thread: ``(True, item)``, or ``(False, None)`` at the end."""
        with self._changed:
            while not self._items and not self._closed:
                self._changed.wait()
            return (True, self._items.popleft()) if self._items else (False, None)

    async def atake(self) -> tuple[bool, T | None]:
        """`take` for async code: the caller's loop waits, not its thread."""
        loop = asyncio.get_running_loop()
        while True:
            with self._changed:
                if self._items:
                    return True, self._items.popleft()
                if self._closed:
                    return False, None
                ready: asyncio.Future[None] = loop.create_future()
                self._waiters.append(_waker(loop, ready))
            await ready


class LoopWork(Generic[T, R]):
    """One piece of work on an event loop: its items in order, its outcome and its stop, from any thread.

    Started at once on `thread`'s loop, or with no thread on the running loop. Items are read with `items`
    (async, from any loop) or `iter_items` (sync, from any thread but the work's own); its outcome with `result`
    or `wait`; `cancel` asks it to stop (the event it was given is set), `aclose` / `close` cancel its task.

    Args:
        work: Starts the work, given a callable that hands one item over and the event that asks it to stop.
        cancel_event: That event (a fresh one when None; given, it must belong to the work's loop).
        thread: The loop to run on (None: the running loop).
        own_thread: `thread` is this work's alone: it is stopped when the work ends, and the outcome waits for it.
    """

    def __init__(
        self,
        work: Work[T, R],
        cancel_event: asyncio.Event | None = None,
        *,
        thread: LoopThread | None = None,
        own_thread: bool = False,
    ) -> None:
        self._handoff: Handoff[T] = Handoff()
        self._cancel = cancel_event if cancel_event is not None else asyncio.Event()
        self._outcome: concurrent.futures.Future[R] = concurrent.futures.Future()
        self._owned = thread if own_thread else None  # a thread of this work only, stopped when it ends
        self._thread = thread
        self._task: asyncio.Task[R] | None = None
        self._loop = thread.loop if thread is not None else asyncio.get_running_loop()
        self._loop_thread_id = thread._thread.ident if thread is not None else threading.get_ident()
        coroutine = work(self._handoff.put, self._cancel)
        if thread is None:
            self._started(coroutine)
        else:
            context = contextvars.copy_context()  # tracing spans, LangChain's run managers follow the work
            try:
                thread.loop.call_soon_threadsafe(self._started, coroutine, context=context)
            except RuntimeError:
                coroutine.close()
                raise

    @classmethod
    def on_new_thread(cls, work: Work[T, R], name: str) -> Self:
        """Start `work` on a new `LoopThread` of its own, which ends with it (its outcome waits for that)."""
        thread = LoopThread(name)
        try:
            return cls(work, thread=thread, own_thread=True)
        except BaseException:
            thread.stop()
            raise

    def _started(self, coroutine: Coroutine[Any, Any, R]) -> None:
        self._task = self._loop.create_task(coroutine)
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[R]) -> None:
        self._handoff.close()
        if task.cancelled():
            self._outcome.set_exception(asyncio.CancelledError())
        elif (failure := task.exception()) is not None:
            self._outcome.set_exception(failure)
        else:
            self._outcome.set_result(task.result())
        if self._owned is not None:
            self._owned.stop()  # from its own thread: the loop stops after this callback

    def _on_loop(self, callback: Callable[[], None]) -> None:
        if self._thread is not None:
            self._thread.call(callback)
        elif threading.get_ident() == self._loop_thread_id:
            callback()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the work has ended with it
                self._loop.call_soon_threadsafe(callback)

    def items(self) -> AsyncIterator[T]:
        """Every item in order, ending when the work ends (its failure is raised by `result`, not here).

        One consumer at a time. Cancelling a wait for the next item loses nothing and ends nothing (unlike an
        async generator's): the next wait gets it (a server reading with a heartbeat cancels such waits).
        """
        return _Items(self._handoff)

    def iter_items(self) -> Iterator[T]:
        """`items` for sync code, from any thread but the work's own loop's."""
        self._refuse_own_thread()
        while True:
            more, item = self._handoff.take()
            if not more:
                return
            yield item  # type: ignore[misc]  # an item, since `more`

    async def result(self) -> R:
        """Wait until the work (and a thread of its own) has ended; its result, or what it raised."""
        await _wait(self._outcome)
        if self._owned is not None:
            await _wait(self._owned.ended)
        return self._outcome.result()

    def wait(self) -> R:
        """`result` for sync code, from any thread but the work's own loop's."""
        self._refuse_own_thread()
        concurrent.futures.wait([self._outcome])
        if self._owned is not None:
            self._owned.stop()  # it is stopping already: this joins it
        return self._outcome.result()

    def cancel(self) -> None:
        """Ask the work to stop (from any thread): its cancel event is set."""
        self._on_loop(self._cancel.set)

    def done(self) -> bool:
        """True once the work has ended."""
        return self._outcome.done()

    async def aclose(self) -> None:
        """Stop the work at once if it is still going (its task is cancelled), and wait until it has ended."""
        if not self.done():
            self._on_loop(self._abort)
        with contextlib.suppress(BaseException):
            await self.result()

    def close(self) -> None:
        """`aclose` for sync code, from any thread but the work's own loop's."""
        if not self.done():
            self._on_loop(self._abort)
        with contextlib.suppress(BaseException):
            self.wait()

    def _abort(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _refuse_own_thread(self) -> None:
        if threading.get_ident() == self._loop_thread_id and not self.done():
            raise RuntimeError(
                "a sync wait for work on this thread's own event loop would never end: use the async methods"
            )


class _Items(AsyncIterator[T]):
    """The async items of a `Handoff`, as an iterator a cancelled ``__anext__`` leaves usable."""

    def __init__(self, handoff: Handoff[T]) -> None:
        self._handoff = handoff

    async def __anext__(self) -> T:
        more, item = await self._handoff.atake()
        if not more:
            raise StopAsyncIteration
        return item  # type: ignore[return-value]  # an item, since `more`


def _waker(loop: asyncio.AbstractEventLoop, ready: asyncio.Future[None]) -> Callable[[], None]:
    def settle() -> None:
        if not ready.done():
            ready.set_result(None)

    def wake() -> None:
        with contextlib.suppress(RuntimeError):  # the reader's loop has closed: nobody waits any more
            loop.call_soon_threadsafe(settle)

    return wake


async def _wait(future: concurrent.futures.Future[Any]) -> None:
    """Wait for `future` from async code; unlike `asyncio.wrap_future`, cancelling this wait leaves it alone."""
    if future.done():
        return
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.add_done_callback(lambda _: _waker(ready.get_loop(), ready)())
    await ready


__all__ = ["Handoff", "LoopThread", "LoopWork", "Work"]
