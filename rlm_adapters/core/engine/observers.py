"""Observers of a run: what watches it from outside (its sources, claims, progress), driven by the engine.

An observer is told when the run starts, each event, when the answer exists, and how the run ended: it is
never a wrapper each adapter repeats around ``acompletion``. It never holds back the answer: every observer
hears `RunObserver.answered` before any of them is asked to finish (``rlm ask`` prints the answer there),
and `RunObserver.finished` gets at most ``sources_timeout`` seconds; one that has not finished by then (or
when the caller stops waiting) is cancelled and told why (`RunObserver.unfinished`), keeps in the result
what it did finish, and is named in ``result.metadata["unfinished"]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from rlm_adapters.core.events import Event, EventBus
from rlm_adapters.core.result import RLMResult

logger = logging.getLogger("rlm_adapters")
INTERRUPTED = "interrupted"


@runtime_checkable
class RunObserver(Protocol):
    """Watches one run from outside: every member the engine reads, each doing nothing unless overridden.

    Subclass `Observer` (this, as a plain class) and give the methods you need: each member here has a body
    (``return None``; an empty one would make it abstract), which `Observer` inherits as a default.

    Attributes:
        name: What it adds to the result (``"sources"``), as ``result.metadata["unfinished"]`` names it.
    """

    name: str

    def started(self, run_id: str) -> None:
        """The run starts (before its first event)."""
        return None

    def event(self, event: Event) -> None:
        """One event of the run (or of a nested run), on the run's loop: keep it cheap."""
        return None

    async def answered(self, result: RLMResult) -> None:
        """The run has ended and its answer exists; no observer has finished yet. Keep it quick."""
        return None

    async def finished(self, result: RLMResult) -> None:
        """Add what it found to `result`; cancelled (then `unfinished`) at the run's ``sources_timeout``."""
        return None

    def unfinished(self, result: RLMResult, why: str) -> None:
        """`finished` was stopped (`why` says how): keep in `result` what is done, and say what is not."""
        return None

    def failed(self, error: BaseException) -> None:
        """The run raised (or was abandoned) before it had an answer: stop working."""
        return None


class Observer(RunObserver):
    """A `RunObserver` that does nothing: subclass it and give the methods you need."""

    name = "observer"


class Observers:
    """The observers of one run, driven by the engine (`core.engine.run`).

    Args:
        observers: The run's observers, in order.
        timeout: Seconds they may take to finish once the answer exists (None: no bound): the run's
            ``sources_timeout``.
    """

    def __init__(self, observers: Sequence[RunObserver], timeout: float | None) -> None:
        self.observers = list(observers)
        self.timeout = timeout

    def start(self, run_id: str, bus: EventBus) -> None:
        """Tell each observer the run starts, and subscribe it to the run's events."""
        for observer in self.observers:
            observer.started(run_id)
            bus.subscribe(observer.event)

    def fail(self, error: BaseException) -> None:
        """The run raised: tell each observer (a failing observer is logged, never raised over the error)."""
        for observer in self.observers:
            try:
                observer.failed(error)
            except Exception:
                logger.warning("observer %r failed on a failed run", observer.name, exc_info=True)

    async def finish(self, result: RLMResult) -> RLMResult:
        """Tell each observer the answer exists, then let them finish within the bound; returns `result`."""
        if not self.observers:
            return result
        for observer in self.observers:
            try:
                await observer.answered(result)
            except Exception:
                logger.warning("observer %r failed when the answer existed", observer.name, exc_info=True)
        tasks = {asyncio.create_task(observer.finished(result)): observer for observer in self.observers}
        try:
            done, pending = await asyncio.wait(tasks, timeout=self.timeout)
        except asyncio.CancelledError:
            await self._stop(result, tasks, INTERRUPTED)
            raise
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                error = task.exception()
                logger.warning("observer %r failed", tasks[task].name, exc_info=error)
                self._cut(result, tasks[task], f"failed: {type(error).__name__}: {error}")
        if pending:
            why = f"cut at {self.timeout:g} s (sources_timeout)"
            await self._stop(result, {task: tasks[task] for task in pending}, why)
        return result

    async def _stop(self, result: RLMResult, tasks: dict[asyncio.Task[None], RunObserver], why: str) -> None:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        for observer in tasks.values():
            self._cut(result, observer, why)

    @staticmethod
    def _cut(result: RLMResult, observer: RunObserver, why: str) -> None:
        result.metadata.setdefault("unfinished", {})[observer.name] = why
        try:
            observer.unfinished(result, why)
        except Exception:
            logger.warning("observer %r failed when it was stopped", observer.name, exc_info=True)


__all__ = ["INTERRUPTED", "Observer", "Observers", "RunObserver"]
