"""Engine events as LangChain ``rlm_progress`` custom events, sent to the chat model's own run."""

from __future__ import annotations

import contextvars
from typing import Any
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForLLMRun,
    Callbacks,
)
from langchain_core.runnables import RunnableConfig, ensure_config

from rlm_adapters.core import Event

PROGRESS_EVENT = "rlm_progress"
EVENT_FIELD_CHARS = 1_000  # custom events are for progress displays, not for the full texts


def event_payload(event: Event) -> dict[str, Any]:
    """An engine event as the data of a ``rlm_progress`` custom event (long texts cut).

    Args:
        event: The engine event.

    Returns:
        The event's fields, its texts cut at ``EVENT_FIELD_CHARS`` (see `Event.to_dict`).
    """
    return event.to_dict(max_chars=EVENT_FIELD_CHARS)


class RunCapture(BaseCallbackHandler):
    """Learns the chat model run's id: `stream` / `astream` call `_stream` without a run manager."""

    run_inline = True

    def __init__(self, callbacks: Callbacks) -> None:
        self.callbacks = callbacks
        self.run_id: UUID | None = None

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Remember the first chat model run that starts."""
        if self.run_id is None:
            self.run_id = run_id


CAPTURE: contextvars.ContextVar[RunCapture | None] = contextvars.ContextVar("rlm_run_capture", default=None)


def capturing(config: RunnableConfig | None) -> tuple[RunnableConfig, RunCapture]:
    """`config` with a `RunCapture` added to its callbacks, and that capture."""
    config = ensure_config(config)
    callbacks = config.get("callbacks")
    capture = RunCapture(callbacks)
    if callbacks is None:
        merged: Callbacks = [capture]
    elif isinstance(callbacks, list):
        merged = [*callbacks, capture]
    else:
        merged = callbacks.copy()
        merged.add_handler(capture, inherit=False)
    return {**config, "callbacks": merged}, capture


def _manager(
    run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None,
) -> tuple[Any, UUID | None]:
    """The handlers and run id progress events go to: this chat model's own run."""
    if run_manager is not None:
        args = {
            "handlers": run_manager.handlers,
            "parent_run_id": run_manager.parent_run_id,
            "tags": run_manager.tags,
            "metadata": run_manager.metadata,
        }
        return args, run_manager.run_id
    capture = CAPTURE.get()
    if capture is None or capture.run_id is None:
        return None, None
    return {"handlers": CallbackManager.configure(capture.callbacks).handlers}, capture.run_id


def progress(run_manager: CallbackManagerForLLMRun | None, event: Event) -> None:
    """Dispatch `event` as a ``rlm_progress`` custom event of the chat model's run, if it has one."""
    args, run_id = _manager(run_manager)
    if args is not None:
        CallbackManager(**args).on_custom_event(PROGRESS_EVENT, event_payload(event), run_id=run_id)


async def aprogress(run_manager: AsyncCallbackManagerForLLMRun | None, event: Event) -> None:
    """`progress` for async callers."""
    args, run_id = _manager(run_manager)
    if args is not None:
        await AsyncCallbackManager(**args).on_custom_event(PROGRESS_EVENT, event_payload(event), run_id=run_id)
