"""Progress notifications from a run's event stream, plus a heartbeat while work goes on.

Clients with tool timeouts (Claude Code among them) treat a call that reports progress as alive, so the
reporter sends one notification per root iteration, one when a batch of sub-calls starts and when it (or
a single sub-call) finishes, and a heartbeat whenever `heartbeat` seconds pass without any; the counts
come from an `EventTally`. The progress value grows with
every notification (the protocol requires it) and stays near the iteration number, with the iteration
ceiling as the total, so a client drawing a bar draws a meaningful one. The message is written for a
person watching: ``iteration 3/30 · 48 sub-calls · $0.12 · reading 212 files``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from types import TracebackType

from rlm_adapters.core import Event, Observer, RLMResult
from rlm_adapters.core.adapter_kit import EventTally

logger = logging.getLogger("rlm_adapters.mcp_server")

# The signature of `Context.report_progress`: (progress, total, message).
SendProgress = Callable[[float, float | None, str | None], Awaitable[None]]
FINDING = "finding sources"  # the phase once the answer exists, while its sources and claims are found
# How much a notification that does not finish an iteration moves the progress value.
_STEP = 0.001


class ProgressReporter:
    """Turns run events into progress notifications; use as an async context manager around the run.

    Args:
        send: Sends one notification (``ctx.report_progress``; a no-op when the client sent no token).
        max_iterations: The iteration ceiling, shown as ``iteration i/N`` and sent as the total.
        heartbeat: Seconds of silence after which the current state is sent again.
    """

    def __init__(self, send: SendProgress, *, max_iterations: int, heartbeat: float) -> None:
        self._send = send
        self.max_iterations = max_iterations
        self.heartbeat = heartbeat
        self.tally = EventTally()
        self.files = 0
        self.phase = "starting"
        self.notifications = 0
        self._progress = 0.0
        self._last_sent = time.monotonic()
        self._lock = asyncio.Lock()
        self._heartbeat_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ProgressReporter:
        await self.notify("starting")
        self._heartbeat_task = asyncio.create_task(self._beat(), name="rlm-mcp-heartbeat")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat_task

    def message(self) -> str:
        """The current state for a person, e.g. ``iteration 3/30 · 48 sub-calls · $0.12 · reading 212 files``.

        Sub-calls read ``done/started`` while some are still out; a phase other than running leads
        (``starting · ...``, ``done · ...``).
        """
        parts = [] if self.phase == "running" else [self.phase]
        parts.append(self.tally.progress_line(self.max_iterations, detail=False))  # the CLI's words, short
        if self.files:
            parts.append(f"reading {self.files} file{'s' if self.files != 1 else ''}")
        return " · ".join(parts)

    async def files_loaded(self, count: int) -> None:
        """The call's files are read: say how many, now and in every later message."""
        self.files = count
        await self.notify("starting" if self.phase.startswith("converting") else None)

    async def converting(self, count: str) -> None:
        """Documents are being converted: ``converting 3/40 PDFs`` leads the message until the files are read."""
        await self.notify(count)

    async def notify(self, phase: str | None = None) -> None:
        """Send the current state now (the progress value moves forward by at least one step)."""
        async with self._lock:
            if phase is not None:
                self.phase = phase
            self._progress = max(float(self.tally.iteration), self._progress + _STEP)
            self._last_sent = time.monotonic()
            self.notifications += 1
            try:
                await self._send(round(self._progress, 6), float(self.max_iterations), self.message())
            except Exception:
                # A client that went away must not end the run; cancellation (not Exception) still stops it.
                logger.debug("could not send a progress notification", exc_info=True)

    def observer(self) -> Observer:
        """The run observer that says ``finding sources`` the moment the answer exists, before the sources are."""
        return _Finding(self)

    async def on_event(self, event: Event) -> None:
        """The run's callback: count the event; notify at a top-level turn, a batch's start and its end."""
        if self.tally.add(event) is not None:
            await self.notify("running")

    async def _beat(self) -> None:
        while True:
            wait = self._last_sent + self.heartbeat - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            await self.notify()


class _Finding(Observer):
    name = "progress"

    def __init__(self, reporter: ProgressReporter) -> None:
        self.reporter = reporter

    async def answered(self, result: RLMResult) -> None:
        await self.reporter.notify(FINDING)
