"""`RLMTool`'s progress as LangChain ``rlm_progress`` custom events of the tool's run: the run's engine events,
and before the run the count of documents converted (``converting 12/40 PDFs``), as the CLI and MCP show it.

The files load in a worker thread (`asyncio.to_thread` under ``ainvoke``): its counts are handed to the event
loop and waited for, one at a time, so handlers hear them in order and before the run's first event.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun

from rlm_adapters.core import Event
from rlm_adapters.documents import ConversionProgress
from rlm_adapters.langchain._callbacks import PROGRESS_EVENT, event_payload

T = TypeVar("T")
CONVERTING = "converting"
# A handler that never returns must not hold the loading thread (and the tool call) forever.
HANDLER_SECONDS = 30.0


def conversion_payload(progress: ConversionProgress) -> dict[str, Any]:
    """A conversion count as the data of a ``rlm_progress`` custom event.

    Returns:
        ``{"kind": "converting", "done", "total", "label", "cached", "text"}`` (``cached``: how many of those
        done came from the conversion cache), ``text`` as the CLI prints it (``converting 12/40 PDFs``).
    """
    return {
        "kind": CONVERTING,
        "done": progress.done,
        "total": progress.total,
        "label": progress.label,
        "cached": progress.cached,
        "text": progress.text(),
    }


def _sender(
    run_manager: CallbackManagerForToolRun | None, payload: Callable[[T], dict[str, Any]]
) -> Callable[[T], None] | None:
    """What sends each item, as `payload` makes it, as a custom event of the sync tool's run (None: no run)."""
    if run_manager is None:
        return None

    def send(item: T) -> None:
        run_manager.get_child().on_custom_event(PROGRESS_EVENT, payload(item), run_id=run_manager.run_id)

    return send


def conversions_to(run_manager: CallbackManagerForToolRun | None) -> Callable[[ConversionProgress], None] | None:
    """What hears the conversion counts of a sync call: a custom event of the tool's run each (None: no run)."""
    return _sender(run_manager, conversion_payload)


def aconversions_to(
    run_manager: AsyncCallbackManagerForToolRun | None, loop: asyncio.AbstractEventLoop, stopped: threading.Event
) -> Callable[[ConversionProgress], None] | None:
    """What hears the conversion counts of an async call, from the loading thread, on `loop`.

    Args:
        run_manager: The tool's run (None: nobody to tell).
        loop: The call's event loop, where the handlers run.
        stopped: Set once the call has ended (cancelled): later counts are dropped.
    """
    if run_manager is None:
        return None

    def heard(progress: ConversionProgress) -> None:
        if stopped.is_set():
            return
        event = run_manager.get_child().on_custom_event(
            PROGRESS_EVENT, conversion_payload(progress), run_id=run_manager.run_id
        )
        try:
            future = asyncio.run_coroutine_threadsafe(event, loop)
        except RuntimeError:  # the loop is closed: the call is gone
            event.close()
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            future.result(HANDLER_SECONDS)

    return heard


def events_to(run_manager: CallbackManagerForToolRun | None) -> Callable[[Event], None] | None:
    """The engine's events of a sync call as custom events of the tool's run (None: no run)."""
    return _sender(run_manager, event_payload)


async def aevent_to(run_manager: AsyncCallbackManagerForToolRun | None, event: Event) -> None:
    """One engine event of an async call as a custom event of the tool's run."""
    if run_manager is not None:
        await run_manager.get_child().on_custom_event(PROGRESS_EVENT, event_payload(event), run_id=run_manager.run_id)
