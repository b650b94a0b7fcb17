"""One RLM run per chat model call: its events as progress while it works, then its result (async and sync)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage

from rlm_adapters.core.citations import SourceTracker
from rlm_adapters.core.events import Event
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.rlm import RLM
from rlm_adapters.langchain._callbacks import aprogress, progress
from rlm_adapters.langchain._messages import conversation_to_context
from rlm_adapters.langchain._structured import final_validator, structured_instructions

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


async def aevents(
    engine: Callable[[str | None], RLM],
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    cancel: asyncio.Event | None = None,
) -> AsyncIterator[Event | RLMResult]:
    """Run one RLM, yielding its events as they happen and then its result.

    Args:
        engine: Builds the engine, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments (``model``, ``rlm_output_schema``, ``tools``, ...).
        cancel: Set to stop the run.

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
    async for item in rlm.astream_with_result(
        context,
        query,
        cancel_event=cancel,
        instructions=instructions,
        final_validator=validator,
        callbacks=[tracker.on_event],
    ):
        if isinstance(item, RLMResult):
            # The lines of the conversation that reached a model and support the answer.
            item.sources = await tracker.asources(item.response)
        yield item


def events(
    engine: Callable[[str | None], RLM], messages: list[BaseMessage], kwargs: dict[str, Any]
) -> Iterator[Event | RLMResult]:
    """`aevents` for sync code, also inside a running event loop: the run gets a private thread.

    Args:
        engine: Builds the engine, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
    """
    items: queue.Queue[Any] = queue.Queue()
    control: dict[str, Any] = {}

    async def pump() -> None:
        control["loop"], control["cancel"] = asyncio.get_running_loop(), asyncio.Event()
        try:
            async for item in aevents(engine, messages, kwargs, control["cancel"]):
                items.put(item)
        except BaseException as exc:
            items.put(_Failure(exc))
        finally:
            items.put(_DONE)

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(asyncio.run, pump()), name="chat-rlm", daemon=True)
    thread.start()
    finished = False
    try:
        while (item := items.get()) is not _DONE:
            if isinstance(item, _Failure):
                raise item.error
            yield item
        finished = True
    finally:
        if not finished and thread.is_alive() and "loop" in control:
            # The caller stopped early: cancel the run (its sandbox closes) and wait for the thread. The
            # loop may be closing on its own meanwhile: then the run has ended and there is nothing to cancel.
            with contextlib.suppress(RuntimeError):
                control["loop"].call_soon_threadsafe(control["cancel"].set)
        thread.join()


def collect(
    engine: Callable[[str | None], RLM],
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: CallbackManagerForLLMRun | None,
) -> RLMResult:
    """Run one RLM, sending its events to the chat model's run as progress, and return its result.

    Args:
        engine: Builds the engine, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
        run_manager: The chat model's run, if LangChain gave one.
    """
    result: RLMResult | None = None
    for item in events(engine, messages, kwargs):
        if isinstance(item, RLMResult):
            result = item
        else:
            progress(run_manager, item)
    assert result is not None
    return result


async def acollect(
    engine: Callable[[str | None], RLM],
    messages: list[BaseMessage],
    kwargs: dict[str, Any],
    run_manager: AsyncCallbackManagerForLLMRun | None,
) -> RLMResult:
    """`collect` for async callers.

    Args:
        engine: Builds the engine, given the call's ``model`` override.
        messages: The conversation.
        kwargs: The call's keyword arguments.
        run_manager: The chat model's run, if LangChain gave one.
    """
    result: RLMResult | None = None
    async for item in aevents(engine, messages, kwargs):
        if isinstance(item, RLMResult):
            result = item
        else:
            await aprogress(run_manager, item)
    assert result is not None
    return result
