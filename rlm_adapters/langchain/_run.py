"""One RLM run per chat model call: its events as progress while it works, then its result (async and sync)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage

from rlm_adapters.core.bridge import iter_sync
from rlm_adapters.core.events import Event
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.rlm import RLM
from rlm_adapters.langchain._callbacks import aprogress, progress
from rlm_adapters.langchain._messages import conversation_to_context
from rlm_adapters.langchain._structured import final_validator, structured_instructions
from rlm_adapters.sources import SourceTracker


async def run_events(
    engine: Callable[[str | None], RLM],
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    results: list[RLMResult],
) -> AsyncGenerator[Event, None]:
    """Run one RLM, yielding its events as they happen; its result (with sources) is appended to `results`.

    Leaving early stops the run (its sandbox is closed).

    Args:
        engine: Builds the engine, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments (``model``, ``rlm_output_schema``, ``tools``, ...).
        results: Receives the run's result once it has ended.

    Raises:
        NotImplementedError: Tools were bound: ChatRLM does not call tools.
    """
    if kwargs.get("tools") or kwargs.get("functions"):
        raise NotImplementedError("ChatRLM does not support tool calling; give the RLM to an agent as RLMTool")
    context, query, instructions = conversation_to_context(messages)
    schema = kwargs.get("rlm_output_schema")
    validator = None
    if schema is not None:
        instructions = "\n\n".join(filter(None, [instructions, structured_instructions(schema)]))
        validator = final_validator(schema)
    rlm = engine(kwargs.get("model"))
    tracker = SourceTracker(context, max_output_chars=rlm.max_output_chars)
    tracker.start()
    handle = rlm.start(
        context, query, instructions=instructions, final_validator=validator, callbacks=[tracker.on_event]
    )
    try:
        async for event in handle.events():
            yield event
        result = await handle.result()
    except BaseException:
        tracker.cancel()
        raise
    finally:
        await handle.aclose()
    # The lines of the conversation that reached a model and support the answer; its claims checked.
    results.append(await tracker.apply(result))


def collect(
    engine: Callable[[str | None], RLM],
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: CallbackManagerForLLMRun | None,
) -> RLMResult:
    """Run one RLM, sending its events to the chat model's run as progress, and return its result.

    Works in sync code and inside a running event loop (the run gets a private thread, see `iter_sync`).

    Args:
        engine: Builds the engine, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
        run_manager: The chat model's run, if LangChain gave one.
    """
    results: list[RLMResult] = []
    for event in iter_sync(run_events(engine, messages, kwargs, results)):
        progress(run_manager, event)
    return results[0]


async def acollect(
    engine: Callable[[str | None], RLM],
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: AsyncCallbackManagerForLLMRun | None,
) -> RLMResult:
    """`collect` for async callers (the same arguments)."""
    results: list[RLMResult] = []
    async with contextlib.aclosing(run_events(engine, messages, kwargs, results)) as events:
        async for event in events:
            await aprogress(run_manager, event)
    return results[0]
