"""`ChatRLM(persistent_threads=True)`: one persistent REPL per ``thread_id`` in the call's config."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage

from rlm_adapters import Message, ScriptedModel
from rlm_adapters.langchain import ChatRLM
from rlm_adapters.langchain._callbacks import CAPTURE
from rlm_adapters.langchain._chat import THREAD


def root(messages: list[Message]) -> str:
    question = messages[1]["content"]
    if "remember" in question:
        return "```repl\nkept = context.split()[-1]\nFINAL('kept')\n```"
    return "```repl\nFINAL(globals().get('kept', 'nothing') + ' / ' + context)\n```"


def make(**options: object) -> ChatRLM:
    return ChatRLM(backend=ScriptedModel(root, model_name="root"), environment="local", **options)


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
        with pytest.raises(NotImplementedError):
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


def test_close_during_a_threads_call_ends_it_cancelled() -> None:
    """Issue 24, defect 6: `close()` from another thread used to leave the call hanging for good."""
    import threading

    started = threading.Event()

    def sub(messages: list[Message]) -> str:
        started.set()
        return "ok"

    llm = ChatRLM(
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
