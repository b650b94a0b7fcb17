"""One RLM run per chat model call: its events as progress while it works, then its result (async and sync)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage

from rlm_adapters.core import RLM, Callback, Continuation, RLMResult, RunHandle
from rlm_adapters.langchain._callbacks import aprogress, progress
from rlm_adapters.langchain._thread_inputs import ThreadInputs
from rlm_adapters.langchain._tool_calling import engine_tool_options
from rlm_adapters.sources import SourceTracker

Engine = Callable[[str | None], AbstractAsyncContextManager[RLM]]


def start(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    threads: ThreadInputs,
    *,
    own_thread: bool,
) -> RunHandle:
    """Start one RLM run: in the running loop, or (``own_thread``) on a loop of its own thread.

    Args:
        engine: Holds the engine for the run, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments (``model``, ``rlm_output_schema``, ``tools``, ``tool_choice``, ...).
        threads: What each thread's persistent REPL holds (a thread's later step gets only its new messages).
        own_thread: Run on a thread of its own (a sync caller, maybe inside a running loop) instead of the
            running loop.
    """
    tool_options = engine_tool_options(kwargs)

    async def run(put: Callback, cancel: asyncio.Event) -> RLMResult:
        async with engine(kwargs.get("model")) as rlm:  # a thread's engine is not closed while it runs
            step = threads.step(rlm, messages)
            context, query, instructions = step.prompt, step.query, step.instructions
            # Sources are lines of the whole conversation, whichever part of it this run is handed: the lines
            # that reached a model and support the answer, its claims checked (within `sources_timeout`).
            whole = context.full if isinstance(context, Continuation) else context
            tracker = SourceTracker(whole, max_output_chars=rlm.max_output_chars)
            # Structured output is the engine's typed answer: it shows the schema, validates, and sends back.
            result = await rlm.acompletion(
                context,
                query,
                instructions=instructions,
                output_schema=kwargs.get("rlm_output_schema"),
                observers=[tracker],
                callbacks=[put],
                cancel_event=cancel,
                **tool_options,
            )
            step.remember(result)
        return result

    return RunHandle.on_new_thread(run, "rlm-chat-run") if own_thread else RunHandle(run)


def collect(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: CallbackManagerForLLMRun | None,
    threads: ThreadInputs,
) -> RLMResult:
    """Run one RLM, sending its events to the chat model's run as progress, and return its result.

    Works in sync code and inside a running event loop (the run gets a thread and a loop of its own).

    Args:
        engine: Holds the engine for the run, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
        run_manager: The chat model's run, if LangChain gave one.
        threads: What each thread's persistent REPL holds.
    """
    handle = start(engine, messages, kwargs, threads, own_thread=True)
    try:
        for event in handle.iter_events():
            progress(run_manager, event)
        return handle.wait()
    finally:
        handle.close()  # left early (a callback raised, an interrupt): the run stops and closes its sandbox


async def acollect(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: AsyncCallbackManagerForLLMRun | None,
    threads: ThreadInputs,
) -> RLMResult:
    """`collect` for async callers (the same arguments)."""
    handle = start(engine, messages, kwargs, threads, own_thread=False)
    try:
        async for event in handle.events():
            await aprogress(run_manager, event)
        return await handle.result()
    finally:
        await handle.aclose()
