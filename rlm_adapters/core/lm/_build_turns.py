"""Requests built one at a time per SDK client, each on its way before the next is built (issue 53).

A batch of calls started at once (``llm_query_batched``) is as many tasks on one event loop. Each has the SDK
build its request (about 1 ms of CPU), then connects and sends it over several loop iterations. asyncio runs
every ready task once per iteration, so the 64 builds of a batch all ran before any connection made progress:
no request went out until the last one was built, the replies came back together, and the SDK read them one
after another while the run waited for the last. With `BuildTurns` one request is built per loop iteration: a
call takes the turn before the SDK builds its request and hands it on when the HTTP client is about to send
it (`hand_on_turn`, a request hook), one iteration later, so that the requests built before it connect and
send in between. The requests go out as they are built and their replies come back spread out; the batch's
CPU is the same.

The turn is held only while the request is built (the SDK's body transform, headers, auth), never while it
connects, sends or waits: one slow endpoint or reply holds up no other call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator
from typing import Any


class _Turn:
    """One call's hold on the turn, handed on once (at the request hook or when the call ends)."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock: asyncio.Lock | None = lock

    def hand_on(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            # One iteration later: a call that finds the turn free in this iteration would build at once.
            asyncio.get_running_loop().call_soon(lock.release)


_held: contextvars.ContextVar[_Turn | None] = contextvars.ContextVar("rlm_build_turn", default=None)


class BuildTurns:
    """The build turns of one SDK client (made with it, inside the event loop it binds to)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for the turn; hold it until the request hook hands it on, or the block ends (a failed build)."""
        await self._lock.acquire()
        turn = _Turn(self._lock)
        token = _held.set(turn)
        try:
            yield
        finally:
            _held.reset(token)
            turn.hand_on()


async def hand_on_turn(request: Any) -> None:
    """Request hook: the request is built and about to be sent; the next call may build its own."""
    turn = _held.get()
    if turn is not None:
        turn.hand_on()


def install_turn_hook(http_client: Any) -> None:
    """Add `hand_on_turn` to an httpx or httpx2 `AsyncClient`'s request hooks, last and once."""
    hooks = http_client.event_hooks
    if hand_on_turn not in hooks.get("request", []):
        http_client.event_hooks = {**hooks, "request": [*hooks.get("request", []), hand_on_turn]}
