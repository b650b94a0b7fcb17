"""A cell's two clocks: the run's wall time, and the cell's own computing time (``cell_timeout``).

A cell that waits on the host's model calls (``llm_query`` to a slow model, a batch of them) is not computing:
that wait is governed by the run's own limits (its timeout, its budget), never by ``cell_timeout``, which is
there to stop code that loops. `WaitClock` counts the time at least one of a sandbox's calls is in flight;
`watch` waits for a cell and says which clock ran out first. Every sandbox that runs cells (the worker's
channel, the in-process one) uses both, so they keep one rule.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Literal

# While calls are in flight the cell's clock is paused; the wait is looked at again this often.
WAIT_POLL = 1.0

Outcome = Literal["done", "run_time", "cell_timeout"]


class WaitClock:
    """Seconds with at least one call in flight (calls may overlap, from threads or tasks; thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._since: float | None = None
        self._total = 0.0

    def begin(self) -> None:
        """A call left for the host."""
        with self._lock:
            if self._in_flight == 0:
                self._since = time.monotonic()
            self._in_flight += 1

    def end(self) -> None:
        """A call came back."""
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0 and self._since is not None:
                self._total += time.monotonic() - self._since
                self._since = None

    @property
    def busy(self) -> bool:
        """Whether a call is in flight now."""
        return self._in_flight > 0

    def waited(self) -> float:
        """Seconds so far with a call in flight."""
        with self._lock:
            ongoing = 0.0 if self._since is None else time.monotonic() - self._since
            return self._total + ongoing


async def watch(
    running: asyncio.Future[Any], clock: WaitClock, run_left: float | None, cell_timeout: float | None
) -> Outcome:
    """Wait for a cell until it is done, the run's time is out, or it has computed for `cell_timeout` seconds.

    Args:
        running: The cell.
        clock: The sandbox's clock of calls in flight.
        run_left: Wall seconds left for the run (None: no limit).
        cell_timeout: Seconds the cell may compute, waits on calls not counted (None: no limit).
    """
    started = time.monotonic()
    waited_before = clock.waited()
    while True:
        elapsed = time.monotonic() - started
        wall = None if run_left is None else run_left - elapsed
        computing = None if cell_timeout is None else cell_timeout - (elapsed - (clock.waited() - waited_before))
        if wall is not None and wall <= 0:
            return "run_time"
        if computing is not None and computing <= 0 and not clock.busy:
            return "cell_timeout"
        waits = [t for t in (wall, WAIT_POLL if clock.busy else computing) if t is not None]
        done, _ = await asyncio.wait({running}, timeout=min(waits, default=None))
        if done:
            return "done"
