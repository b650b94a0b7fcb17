"""`ChatRLM(persistent_threads=True)`: one persistent REPL per ``thread_id`` in the call's config, within a
cap, an idle limit and a lifetime limit (issue 24, defect 11)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from pydantic import ValidationError

from rlm_adapters import Message, ScriptedModel
from rlm_adapters.errors import SessionLimitError
from rlm_adapters.langchain import ChatRLM
from rlm_adapters.langchain._callbacks import CAPTURE
from rlm_adapters.langchain._chat import THREAD
from tests.core.sandbox.helpers import ProcessWatch

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts processes through /proc")


def root(messages: list[Message]) -> str:
    question = messages[1]["content"]
    if "remember" in question:
        return "```repl\nkept = context.split()[-1]\nFINAL('kept')\n```"
    return "```repl\nFINAL(globals().get('kept', 'nothing') + ' / ' + context)\n```"


def make(**options: object) -> ChatRLM:
    return ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel(root, model_name="root"), **{"environment": "local", **options}
    )


def thread(name: str) -> dict[str, object]:
    return {"configurable": {"thread_id": name}}


def test_calls_of_one_thread_share_a_repl_and_threads_are_apart() -> None:
    llm = make(persistent_threads=True)
    try:
        assert llm.invoke([HumanMessage("remember apple")], thread("a")).content == "kept"
        assert llm.invoke([HumanMessage("recall")], thread("a")).content == "apple / recall"
        assert llm.invoke([HumanMessage("recall")], thread("b")).content == "nothing / recall"
        assert llm.invoke([HumanMessage("recall")]).content == "nothing / recall"  # no thread: a fresh run
    finally:
        llm.close()


def test_async_calls_and_streaming_use_the_thread_too() -> None:
    async def main() -> tuple[str, str]:
        llm = make(persistent_threads=True)
        try:
            await llm.ainvoke([HumanMessage("remember pear")], thread("t"))
            chunks = [c.content async for c in llm.astream([HumanMessage("recall")], thread("t"))]
            return "".join(str(c) for c in chunks), str((await llm.ainvoke([HumanMessage("x")], thread("t"))).content)
        finally:
            await asyncio.to_thread(llm.close)

    assert asyncio.run(main()) == ("pear / recall", "pear / x")


def test_off_by_default() -> None:
    llm = make()
    llm.invoke([HumanMessage("remember apple")], thread("a"))
    assert llm.invoke([HumanMessage("recall")], thread("a")).content == "nothing / recall"


def test_every_call_leaves_the_thread_and_the_capture_as_it_found_them() -> None:
    """`call_scope` resets its context variables after each of the four calls, a failed one included."""
    llm = make(persistent_threads=True)
    try:
        llm.invoke([HumanMessage("remember fig")], thread("s"))
        assert (THREAD.get(), CAPTURE.get()) == (None, None)
        assert "".join(str(c.content) for c in llm.stream([HumanMessage("recall")], thread("s"))) == "fig / recall"
        assert (THREAD.get(), CAPTURE.get()) == (None, None)
        stream = llm.stream([HumanMessage("recall")], thread("s"))
        next(stream)
        stream.close()  # left after its first chunk
        assert (THREAD.get(), CAPTURE.get()) == (None, None)
        with pytest.raises(ValueError, match="tool"):
            llm.invoke([HumanMessage("recall")], thread("s"), tools=[{"type": "function"}])
        assert (THREAD.get(), CAPTURE.get()) == (None, None)

        async def both() -> str:
            await llm.ainvoke([HumanMessage("remember kiwi")], thread("s"))
            chunks = [str(c.content) async for c in llm.astream([HumanMessage("recall")], thread("s"))]
            assert (THREAD.get(), CAPTURE.get()) == (None, None)
            return "".join(chunks)

        assert asyncio.run(both()) == "kiwi / recall"
    finally:
        llm.close()


class Closes:
    """Waits for the pool's thread to close a given number of thread REPLs."""

    def __init__(self, llm: ChatRLM) -> None:
        llm.invoke([HumanMessage("recall")], thread("warm-up"))  # the pool exists from the first thread on
        assert llm._threads is not None
        self.reasons: list[str] = []
        self._cond = threading.Condition()
        llm._threads.pool.add_listener(self._closed)

    def _closed(self, owner: str, name: object, reason: str) -> None:
        with self._cond:
            self.reasons.append(reason)
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 30.0) -> list[str]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.reasons) >= count, timeout), self.reasons
            return list(self.reasons)


@needs_proc
def test_threads_past_the_cap_close_the_least_recently_used_and_its_sandbox() -> None:
    """Issue 24, defect 11: 24 thread ids left 24 sandboxes (72 processes) alive, with no cap."""
    watch = ProcessWatch()
    llm = make(persistent_threads=True, environment="subprocess")  # the default cap: 16 threads
    try:
        llm.invoke([HumanMessage("remember t0")], thread("t0"))
        per_sandbox = len(watch.new())
        assert per_sandbox >= 1
        for i in range(1, 24):
            llm.invoke([HumanMessage(f"remember t{i}")], thread(f"t{i}"))
        assert len(watch.new()) == 16 * per_sandbox
        assert llm.invoke([HumanMessage("recall")], thread("t23")).content == "t23 / recall"
        assert llm.invoke([HumanMessage("recall")], thread("t0")).content == "nothing / recall"  # it was closed
    finally:
        llm.close()
    assert watch.new() == set()


@needs_proc
def test_an_idle_thread_closes_on_a_timer_with_its_processes() -> None:
    watch = ProcessWatch()
    llm = make(persistent_threads=True, environment="subprocess", thread_idle_timeout=0.5)
    try:
        closes = Closes(llm)
        assert closes.wait(1) == ["idle_timeout"]  # the warm-up thread, without another call
        assert watch.new() == set()
    finally:
        llm.close()


def test_a_thread_reaches_its_lifetime_and_starts_afresh() -> None:
    llm = make(persistent_threads=True, thread_max_lifetime=0.3, thread_idle_timeout=None)
    try:
        closes = Closes(llm)
        assert closes.wait(1) == ["max_lifetime"]
        llm.invoke([HumanMessage("remember apple")], thread("a"))
        assert closes.wait(2) == ["max_lifetime", "max_lifetime"]
        assert llm.invoke([HumanMessage("recall")], thread("a")).content == "nothing / recall"
    finally:
        llm.close()


def test_a_thread_with_a_call_in_flight_is_never_closed_to_make_room() -> None:
    inside, release = threading.Event(), threading.Event()

    def holding(messages: list[Message]) -> str:
        if "hold" in messages[1]["content"]:
            inside.set()
            assert release.wait(30)
            return "```repl\nkept = 'held'\nFINAL('held')\n```"
        return root(messages)

    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(holding, model_name="root"),
        environment="local",
        persistent_threads=True,
        max_threads=1,
    )
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(llm.invoke, [HumanMessage("hold")], thread("a"))
            assert inside.wait(30)
            with pytest.raises(SessionLimitError) as refused:
                llm.invoke([HumanMessage("recall")], thread("b"))
            release.set()
            assert held.result(30).content == "held"
        assert str(refused.value) == (
            "thread 'b' cannot be opened: 1 threads are open for this caller and each has a call in flight "
            "(max_threads=1); wait for a call to finish, or reuse an open thread"
        )
        assert llm.invoke([HumanMessage("recall")], thread("a")).content == "held / recall"
        assert llm.invoke([HumanMessage("recall")], thread("b")).content == "nothing / recall"  # "a" made room
    finally:
        llm.close()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_threads", 0, "max_threads=0 must be an integer >= 1"),
        ("thread_idle_timeout", -1.0, "thread_idle_timeout=-1.0 must be a positive number of seconds or None"),
        ("thread_max_lifetime", float("inf"), "thread_max_lifetime=inf must be a positive number of seconds"),
    ],
)
def test_bad_thread_limits_are_refused_naming_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        make(persistent_threads=True, **{field: value})


def test_close_during_a_threads_call_ends_it_cancelled() -> None:
    """Issue 24, defect 6: `close()` from another thread used to leave the call hanging for good."""
    started = threading.Event()

    def sub(messages: list[Message]) -> str:
        started.set()
        return "ok"

    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(lambda m: "```repl\nllm_query('x')\nimport time\ntime.sleep(60)\n```", model_name="r"),
        other_backends=[ScriptedModel(sub, model_name="sub")],
        environment="subprocess",
        persistent_threads=True,
    )
    replies: list[object] = []
    call = threading.Thread(target=lambda: replies.append(llm.invoke([HumanMessage("q")], thread("a"))), daemon=True)
    call.start()
    assert started.wait(60)
    llm.close()
    call.join(15)
    assert not call.is_alive(), "the call still hangs after close()"
    (reply,) = replies
    assert reply.response_metadata["finish_reason"] == "cancelled"  # type: ignore[attr-defined]
