"""A probe of an event loop's worst stall: a task that sleeps a few milliseconds in a loop and records the
largest overshoot, i.e. the longest time something else held the loop (issue 48, item 3)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from types import TracebackType

import pytest

INTERVAL = 0.01  # seconds the probe sleeps each time
MAX_STALL = 0.1  # what a test holds the loop's worst stall under


class LagProbe:
    """``async with LagProbe() as probe: ...``; then `probe.worst` is the largest overshoot in seconds and
    `probe.ticks` how many times it woke (a loop held for good wakes it never: the exit waits for one more)."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self.worst = 0.0
        self.ticks = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.worst = max(self.worst, time.perf_counter() - started - self.interval)
            self.ticks += 1

    async def __aenter__(self) -> LagProbe:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)  # running before the load starts
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


@pytest.fixture
def frozen_heap() -> Iterator[None]:
    """The test process's own objects (a pytest worker's, after hundreds of tests) frozen out of the garbage
    collector while a probe runs: a full collection of them holds every thread 0.5 s on a busy machine, and
    they are not the load being measured (`rlm serve` freezes what it holds at start the same way)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
