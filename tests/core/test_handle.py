"""`RLM.start` / `RunHandle`, the sync bridge (`run_sync`, `iter_sync`) and `Event.to_dict(max_chars=)`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.engine.bridge import iter_sync, run_sync
from rlm_adapters.core.events import CellExecuted, RootCall, RunFinished, RunStarted
from rlm_adapters.errors import ContextError
from rlm_adapters.testing import by_turn

SLOW = "```repl\nimport time\ntime.sleep(0.2)\n```"  # each turn a short cell: a run that goes on for 50 turns


async def test_a_handle_streams_the_events_then_gives_the_result() -> None:
    rlm = RLM(backend=by_turn("```repl\nprint(len(context))\n```", "FINAL(done)"), environment="local")
    handle = rlm.start("abcdef", "how long?")
    kinds = [event.kind async for event in handle.events()]
    result = await handle.result()
    assert kinds[0] == "run_start" and kinds[-1] == "final" and "cell" in kinds
    assert (result.response, result.finish_reason) == ("done", "final")
    assert handle.done()


async def test_cancel_ends_the_run_with_a_cancelled_result() -> None:
    rlm = RLM(backend=by_turn(SLOW), environment="local", max_iterations=50)
    handle = rlm.start("ctx", "q")
    async for event in handle.events():
        if isinstance(event, CellExecuted):
            handle.cancel()
    result = await handle.result()
    assert result.finish_reason == "cancelled" and result.iterations < 50


async def test_a_failed_run_raises_from_result_and_astream() -> None:
    rlm = RLM(backend=by_turn("FINAL(never)"), environment="local")
    handle = rlm.start(b"raw bytes", "q")
    assert [event async for event in handle.events()] == []
    with pytest.raises(ContextError, match="decode it to str first"):
        await handle.result()
    with pytest.raises(ContextError, match="decode it to str first"):
        _ = [event async for event in rlm.astream(b"raw bytes", "q")]


async def test_astream_left_early_stops_the_run() -> None:
    rlm = RLM(backend=by_turn(SLOW), environment="local", max_iterations=50)
    seen: list[object] = []
    stream = rlm.astream("ctx", "q", callbacks=[seen.append])
    async for event in stream:
        if isinstance(event, RootCall):
            break
    await stream.aclose()
    count = len(seen)
    await asyncio.sleep(0.5)  # a run still going would have emitted more events by now
    assert len(seen) == count and not any(isinstance(e, RunFinished) and e.finish_reason == "final" for e in seen)


def test_iter_sync_yields_in_order_and_reraises_in_the_caller() -> None:
    async def numbers() -> AsyncIterator[int]:
        for n in range(3):
            await asyncio.sleep(0)
            yield n
        raise ValueError("after three")

    got: list[int] = []
    with pytest.raises(ValueError, match="after three"):
        for n in iter_sync(numbers()):
            got.append(n)
    assert got == [0, 1, 2]


def test_iter_sync_left_early_cancels_the_async_side_and_waits_for_it() -> None:
    cleaned = threading.Event()

    async def forever() -> AsyncIterator[int]:
        try:
            while True:
                yield 1
                await asyncio.sleep(0.01)
        finally:
            cleaned.set()

    items = iter_sync(forever())
    assert next(items) == 1
    items.close()
    assert cleaned.is_set()  # close() returned only once the async side had cleaned up


async def test_run_sync_and_iter_sync_work_inside_a_running_loop() -> None:
    rlm = RLM(backend=by_turn("FINAL(ok)"), environment="local")
    assert run_sync(rlm.acompletion("ctx", "q")).response == "ok"
    kinds = [event.kind for event in iter_sync(rlm.astream("ctx", "q"))]
    assert kinds == ["run_start", "root_call", "final"]


def test_to_dict_cuts_the_texts_and_the_messages_sent() -> None:
    call = RootCall(
        run_id="r",
        iteration=1,
        messages_sent=[{"role": "user", "content": "m" * 50}],
        reply="r" * 30,
        model="a-model-name-longer-than-ten",
        input_tokens=1,
        output_tokens=1,
        cost=0.0,
        duration=0.0,
    )
    full = call.to_dict()
    assert full["reply"] == "r" * 30 and full["messages_sent"][0]["content"] == "m" * 50
    short = call.to_dict(max_chars=10)
    assert short["reply"] == "r" * 10 + "... [+20 chars]"
    assert short["messages_sent"][0]["content"] == "m" * 40 + "... [+10 chars]"  # messages keep four times as much
    assert short["model"] == "a-model-name-longer-than-ten"  # names and numbers are never cut
    assert call.reply == "r" * 30  # the event itself is untouched
    started = RunStarted(
        run_id="r",
        query="q",
        context_description={},
        root_model="m",
        sub_models=[],
        sandbox="local",
        isolation="none",
        max_iterations=1,
        max_depth=1,
    )
    assert started.to_dict(max_chars=1) == started.to_dict()
