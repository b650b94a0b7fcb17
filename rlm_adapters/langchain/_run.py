"""One RLM run per chat model call: its answer's pieces and its events as progress while it works, then its
result (async and sync)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage

from rlm_adapters.core import RLM, AnswerDelta, Callback, Continuation, RLMResult, RunHandle
from rlm_adapters.langchain._callbacks import aprogress, progress
from rlm_adapters.langchain._messages import chat_entries
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
                chat=chat_entries(messages),
                **tool_options,
            )
            step.remember(result)
        return result

    return RunHandle.on_new_thread(run, "rlm-chat-run") if own_thread else RunHandle(run)


def pieces(handle: RunHandle, run_manager: CallbackManagerForLLMRun | None) -> Iterator[str]:
    """The answer's pieces as the model writes them (the direct route's); every other event of the run goes to
    the chat model's run as progress. The run's result (or its failure) is then `handle.wait()`."""
    for event in handle.iter_events():
        if isinstance(event, AnswerDelta):
            yield event.text
        else:
            progress(run_manager, event)


async def apieces(handle: RunHandle, run_manager: AsyncCallbackManagerForLLMRun | None) -> AsyncIterator[str]:
    """`pieces` for async callers; the result is then ``await handle.result()``."""
    async for event in handle.events():
        if isinstance(event, AnswerDelta):
            yield event.text
        else:
            await aprogress(run_manager, event)


def collect(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: CallbackManagerForLLMRun | None,
    threads: ThreadInputs,
    on_piece: Callable[[str], None] | None = None,
) -> RLMResult:
    """Run one RLM, sending its events to the chat model's run as progress, and return its result.

    Works in sync code and inside a running event loop (the run gets a thread and a loop of its own).

    Args:
        engine: Holds the engine for the run, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
        run_manager: The chat model's run, if LangChain gave one.
        threads: What each thread's persistent REPL holds.
        on_piece: Handed each piece of the answer as the model writes it (the direct route's).
    """
    handle = start(engine, messages, kwargs, threads, own_thread=True)
    try:
        for piece in pieces(handle, run_manager):
            if on_piece is not None:
                on_piece(piece)
        return handle.wait()
    finally:
        handle.close()  # left early (a callback raised, an interrupt): the run stops and closes its sandbox


async def acollect(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: AsyncCallbackManagerForLLMRun | None,
    threads: ThreadInputs,
    on_piece: Callable[[str], Awaitable[None] | None] | None = None,
) -> RLMResult:
    """`collect` for async callers (the same arguments; `on_piece` may be async)."""
    handle = start(engine, messages, kwargs, threads, own_thread=False)
    try:
        async for piece in apieces(handle, run_manager):
            if on_piece is not None:
                outcome = on_piece(piece)
                if inspect.isawaitable(outcome):
                    await outcome
        return await handle.result()
    finally:
        await handle.aclose()
