"""Waiting for processes to end without polling: a pidfd becomes readable when its process has exited."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def exited(pids: Iterable[int], timeout: float) -> set[int]:
    """Wait up to `timeout` seconds for every process of `pids` to exit; the pids still running then."""
    loop = asyncio.get_running_loop()
    waits: dict[int, asyncio.Future[None]] = {}
    fds: list[int] = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # already gone (and reaped)
        fds.append(fd)
        done: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, lambda f=done: f.done() or f.set_result(None))
        waits[pid] = done
    try:
        if waits:
            await asyncio.wait(waits.values(), timeout=max(timeout, 0.0))
        return {pid for pid, done in waits.items() if not done.done()}
    finally:
        for fd in fds:
            loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)


async def cancelled_within_2_s(cancel: Awaitable[T], workers: set[int]) -> T:
    """Await `cancel` (a call that cancels a run) and assert every process of `workers` exited within 2 s of
    its start; `cancel`'s result."""
    started = time.monotonic()
    result = await cancel
    left = await exited(workers, 2.0 - (time.monotonic() - started))
    assert not left, "the sandbox worker must be gone within 2 s of the cancel"
    return result
