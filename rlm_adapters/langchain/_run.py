"""One RLM run per chat model call: its events as progress while it works, then its result (async and sync)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage

from rlm_adapters.core import RLM, AnswerDelta, Continuation, Event, RLMResult, iter_sync
from rlm_adapters.langchain._callbacks import aprogress, progress
from rlm_adapters.langchain._messages import chat_entries
from rlm_adapters.langchain._thread_inputs import ThreadInputs
from rlm_adapters.langchain._tools import engine_tool_options
from rlm_adapters.sources import SourceTracker

Engine = Callable[[str | None], AbstractAsyncContextManager[RLM]]


async def run_events(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    results: list[RLMResult],
    threads: ThreadInputs,
) -> AsyncGenerator[Event, None]:
    """Run one RLM, yielding its events as they happen; its result (with sources) is appended to `results`.

    Leaving early stops the run (its sandbox is closed).

    Args:
        engine: Holds the engine for the run, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments (``model``, ``rlm_output_schema``, ``tools``, ``tool_choice``, ...).
        results: Receives the run's result once it has ended.
        threads: What each thread's persistent REPL holds (a thread's later step gets only its new messages).
    """
    tool_options = engine_tool_options(kwargs)
    async with engine(kwargs.get("model")) as rlm:  # a thread's engine is not closed while it runs
        step = threads.step(rlm, messages)
        context, query, instructions = step.prompt, step.query, step.instructions
        # Sources are lines of the whole conversation, whichever part of it this run is handed: the lines
        # that reached a model and support the answer, its claims checked (within `sources_timeout`).
        whole = context.full if isinstance(context, Continuation) else context
        tracker = SourceTracker(whole, max_output_chars=rlm.max_output_chars)
        # Structured output is the engine's typed answer: it shows the schema, validates, and sends back.
        handle = rlm.start(
            context,
            query,
            instructions=instructions,
            output_schema=kwargs.get("rlm_output_schema"),
            observers=[tracker],
            chat=chat_entries(messages),
            **tool_options,
        )
        try:
            async for event in handle.events():
                yield event
            result = await handle.result()
        finally:
            await handle.aclose()
        step.remember(result)
    results.append(result)


def pieces(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: CallbackManagerForLLMRun | None,
    threads: ThreadInputs,
    results: list[RLMResult],
) -> Iterator[str]:
    """Run one RLM, yielding the answer's pieces as the model writes them (the direct route's) and sending
    every other event to the chat model's run as progress; its result is appended to `results`.

    Works in sync code and inside a running event loop (the run gets a private thread, see `iter_sync`).

    Args:
        engine: Holds the engine for the run, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
        run_manager: The chat model's run, if LangChain gave one.
        threads: What each thread's persistent REPL holds.
        results: Receives the run's result once it has ended.
    """
    for event in iter_sync(run_events(engine, messages, kwargs, results, threads)):
        if isinstance(event, AnswerDelta):
            yield event.text
        else:
            progress(run_manager, event)


async def apieces(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: AsyncCallbackManagerForLLMRun | None,
    threads: ThreadInputs,
    results: list[RLMResult],
) -> AsyncIterator[str]:
    """`pieces` for async callers (the same arguments)."""
    async with contextlib.aclosing(run_events(engine, messages, kwargs, results, threads)) as events:
        async for event in events:
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
    """Run one RLM (as `pieces`, each piece of the answer handed to `on_piece`) and return its result."""
    results: list[RLMResult] = []
    for piece in pieces(engine, messages, kwargs, run_manager, threads, results):
        if on_piece is not None:
            on_piece(piece)
    return results[0]


async def acollect(
    engine: Engine,
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: AsyncCallbackManagerForLLMRun | None,
    threads: ThreadInputs,
    on_piece: Callable[[str], Any] | None = None,
) -> RLMResult:
    """`collect` for async callers (the same arguments; `on_piece` may be async)."""
    results: list[RLMResult] = []
    async for piece in apieces(engine, messages, kwargs, run_manager, threads, results):
        if on_piece is not None:
            outcome = on_piece(piece)
            if inspect.isawaitable(outcome):
                await outcome
    return results[0]
