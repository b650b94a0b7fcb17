"""`LoopThread` and `LoopWork` (`RunHandle`'s machinery): one piece of work on another thread's loop, its items in
order, its outcome with its exception's type, its stop from the caller's side, and no thread left behind."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from rlm_adapters import RLM
from rlm_adapters.core import RunHandle
from rlm_adapters.core.engine.loop_thread import LoopThread, LoopWork
from rlm_adapters.core.events import CellExecuted
from rlm_adapters.testing import by_turn

SLOW = "```repl\nimport time\ntime.sleep(0.2)\n```"  # each turn a short cell: a run that goes on for 50 turns


class Refused(ValueError):
    """A failure of the work's own type, to see that it reaches the caller as it was raised."""


async def count_then_fail(put: Callable[[int], None], stop: asyncio.Event) -> str:
    for n in range(1000):
        put(n)
        if n % 100 == 0:
            await asyncio.sleep(0)
    raise Refused("after a thousand")


async def until_stopped(put: Callable[[str], None], stop: asyncio.Event) -> str:
    put(threading.current_thread().name)
    await stop.wait()
    return "stopped"


def threads_named(name: str) -> list[threading.Thread]:
    """The threads of that name still alive (one whose last act is done is given a moment to return)."""
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(timeout=1)
    return [thread for thread in threading.enumerate() if thread.name == name]


def test_items_arrive_in_order_and_the_failure_keeps_its_type_for_a_sync_caller() -> None:
    work = LoopWork.on_new_thread(count_then_fail, "test-work")
    assert list(work.iter_items()) == list(range(1000))
    with pytest.raises(Refused, match="after a thousand"):
        work.wait()
    assert threads_named("test-work") == []  # the outcome waits for the work's own thread to end


async def test_items_arrive_in_order_and_the_failure_keeps_its_type_for_an_async_caller() -> None:
    work = LoopWork.on_new_thread(count_then_fail, "test-work")
    assert [n async for n in work.items()] == list(range(1000))
    with pytest.raises(Refused, match="after a thousand"):
        await work.result()
    assert threads_named("test-work") == []


async def test_cancel_from_the_caller_reaches_the_work_on_its_thread() -> None:
    work = LoopWork.on_new_thread(until_stopped, "test-work")
    async for where in work.items():
        assert where == "test-work"  # the work runs on its own thread, not the caller's
        work.cancel()
    assert await work.result() == "stopped"


def test_a_sync_caller_cancels_and_closes_from_its_thread() -> None:
    work = LoopWork.on_new_thread(until_stopped, "test-work")
    assert next(work.iter_items()) == "test-work"
    work.close()  # its task is cancelled; close returns once the thread has ended
    assert work.done() and threads_named("test-work") == []
    with pytest.raises(asyncio.CancelledError):
        work.wait()


async def test_a_cancelled_wait_for_the_next_item_loses_nothing() -> None:
    """A server reading events with a heartbeat cancels its wait for the next one: the stream goes on."""
    release = threading.Event()

    async def slow(put: Callable[[int], None], stop: asyncio.Event) -> None:
        await asyncio.to_thread(release.wait)
        put(1)
        put(2)

    work = LoopWork.on_new_thread(slow, "test-work")
    events = work.items().__aiter__()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(events.__anext__(), 0.05)
    release.set()
    assert [n async for n in events] == [1, 2]  # the same iterator, nothing lost
    await work.result()


async def test_cancelling_a_wait_for_the_result_leaves_the_work_alone() -> None:
    work = LoopWork.on_new_thread(until_stopped, "test-work")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(work.result(), 0.05)
    assert not work.done()
    work.cancel()
    assert await work.result() == "stopped"


async def test_a_sync_wait_on_the_works_own_loop_is_refused_instead_of_hanging() -> None:
    work: LoopWork[str, str] = LoopWork(until_stopped)  # on this thread's running loop
    with pytest.raises(RuntimeError, match="use the async methods"):
        work.wait()
    work.cancel()
    assert await work.result() == "stopped"


def test_a_stopped_loop_thread_cancels_what_it_still_ran_and_ends() -> None:
    thread = LoopThread("test-loop")
    work: LoopWork[str, str] = LoopWork(until_stopped, thread=thread)
    assert next(work.iter_items()) == "test-loop"
    thread.stop()
    assert thread.loop.is_closed() and threads_named("test-loop") == []
    with pytest.raises(asyncio.CancelledError):
        work.wait()
    with pytest.raises(RuntimeError):  # nothing starts on a closed loop
        LoopWork(until_stopped, thread=thread)


async def test_a_run_on_a_thread_of_its_own_is_cancelled_from_the_callers_loop() -> None:
    rlm = RLM(backend=by_turn(SLOW), environment="local", max_iterations=50)

    async def run(put: Callable[..., None], stop: asyncio.Event):  # type: ignore[no-untyped-def]
        return await rlm.acompletion("ctx", "q", callbacks=[put], cancel_event=stop)

    handle = RunHandle.on_new_thread(run, "test-run")
    async for event in handle.events():
        if isinstance(event, CellExecuted):
            handle.cancel()
    result = await handle.result()
    assert result.finish_reason == "cancelled" and result.iterations < 50
    assert threads_named("test-run") == []


def test_stopping_twice_from_both_sides_lets_the_first_clean_up_finish() -> None:
    """The work's end stops its own thread while a sync caller's `close` stops it too: one clean-up, no error."""
    failures: list[BaseException] = []
    hook, threading.excepthook = threading.excepthook, lambda args: failures.append(args.exc_value)  # type: ignore[assignment]

    async def in_a_thread(put: Callable[[int], None], stop: asyncio.Event) -> None:
        await asyncio.to_thread(put, 1)  # the loop's default executor: its shutdown is part of the clean-up

    try:
        for _ in range(20):
            work = LoopWork.on_new_thread(in_a_thread, "test-work")
            work.wait()
    finally:
        threading.excepthook = hook
    assert failures == [] and threads_named("test-work") == []
