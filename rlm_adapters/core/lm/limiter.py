"""Adaptive concurrency per model endpoint: AIMD on the calls in flight, as TCP does on its window.

A fixed limit is either too low (64 prompts in two waves) or too high (a provider's rate limit).
`AdaptiveLimiter` starts high, doubles while every call succeeds (slow start), grows by about one call
per round trip after the first overload, and cuts the limit by `DECREASE` when the endpoint says it
is overloaded (HTTP 429 or 503, a ``Retry-After`` header, an exhausted ``x-ratelimit-remaining-*``
header). Only one cut is made per round trip: calls that left before the last cut report an overload
the cut already answered. The user's ``max_concurrency`` is the hard ceiling. What was learnt about an
endpoint outlives the run: the next run in this process (an MCP server's next call, a chat model's next
turn) starts from it instead of from scratch.

`run_call` wraps one call: it takes a slot, reports the outcome, and retries overloads (and other
errors the client marks retryable) after the server's ``Retry-After`` or an exponential backoff,
holding no slot while it waits, so that an overloaded endpoint loses no call. It never waits past the
run's deadline: a retry whose wait would end after it fails the call at once (`DeadlineExceeded`), and a
server asking for more than `MAX_RETRY_AFTER` seconds is not retried at all.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Awaitable, Callable

from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.lm.deadline import DeadlineExceeded, call_deadline, check_wait, seconds
from rlm_adapters.errors import ModelError

DEFAULT_CEILING = 256  # `max_concurrency` when the user sets none
DEFAULT_START = 128  # calls in flight before anything is known about an endpoint
DECREASE = 0.7  # the multiplicative cut on overload (CUBIC's beta: gentler than halving)
OVERLOAD_STATUSES = frozenset({429, 503})
OVERLOAD_RETRIES = 8  # tries after an overload answer; each waits, so a run's deadline bounds them too
OTHER_RETRIES = 2  # tries after other retryable failures (the SDKs' usual default)
BACKOFF_BASE = 0.25
BACKOFF_MAX = 8.0
MAX_RETRY_AFTER = 60.0  # a longer pause asked by a server is "not now": the call fails instead of stalling


# What each endpoint taught this process: its last limit and whether it was still in slow start.
_learned: dict[str, tuple[float, bool]] = {}


def forget_learned_limits() -> None:
    """Forget every endpoint's learnt limit (tests, or after a provider raised a rate limit)."""
    _learned.clear()


class AdaptiveLimiter:
    """An AIMD bound on the calls in flight to one endpoint.

    Args:
        ceiling: The hard maximum (the user's ``max_concurrency``).
        start: Calls allowed in flight at first (capped by `ceiling`); by default what this process
            learnt about `endpoint`, else `DEFAULT_START`.
        endpoint: The endpoint's key, to remember what was learnt (None: remember nothing).
    """

    def __init__(self, ceiling: int, start: int | None = None, endpoint: str | None = None) -> None:
        self.ceiling = max(1, ceiling)
        self._endpoint = endpoint
        limit, slow_start = float(DEFAULT_START), True
        if start is not None:
            limit = float(start)
        elif endpoint in _learned:
            limit, slow_start = _learned[endpoint]
        self._limit = max(1.0, min(limit, float(self.ceiling)))
        self._slow_start = slow_start
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._epoch = 0  # bumped on each cut; a call remembers the epoch it left in
        self.decreases = 0
        self.peak_in_flight = 0

    @property
    def limit(self) -> int:
        """The calls allowed in flight now."""
        return max(1, int(self._limit))

    @property
    def in_flight(self) -> int:
        """The calls in flight now."""
        return self._in_flight

    async def acquire(self) -> int:
        """Wait for a slot (first come, first served).

        Returns:
            The epoch the call leaves in, to give back to `overloaded`.
        """
        if self._waiters or self._in_flight >= self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self.release()  # the slot was handed over just as the caller was cancelled
                else:
                    self._waiters.remove(waiter)
                raise
        else:
            self._in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        return self._epoch

    def release(self) -> None:
        """Give a slot back."""
        self._in_flight -= 1
        self._wake()

    def succeeded(self) -> None:
        """A call came back: grow (by one per call in slow start, else about one per round trip)."""
        self._limit = min(float(self.ceiling), self._limit + (1.0 if self._slow_start else 1.0 / self._limit))
        self._remember()
        self._wake()

    def overloaded(self, epoch: int) -> bool:
        """The endpoint said it is overloaded; cut the limit once per round trip.

        Args:
            epoch: What `acquire` returned for the call that saw the overload.

        Returns:
            Whether the limit was cut (False when an earlier cut already answered this round trip).
        """
        if epoch < self._epoch:
            return False
        self._epoch += 1
        self._slow_start = False
        # Cut from what was really in use (a limit of 64 with 5 calls in flight is 5 in use), but by no
        # more than the limit itself would be cut twice: one stray 429 must not collapse a wide limit.
        in_use = min(self._limit, max(float(self._in_flight), self._limit / 2))
        self._limit = max(1.0, in_use * DECREASE)
        self.decreases += 1
        self._remember()
        return True

    def _remember(self) -> None:
        if self._endpoint is not None:
            _learned[self._endpoint] = (self._limit, self._slow_start)

    def _wake(self) -> None:
        while self._waiters and self._in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._in_flight += 1
                waiter.set_result(None)


def is_overload(error: ModelError) -> bool:
    """Whether a failed call means "too many calls" (so the limit should come down)."""
    return error.status_code in OVERLOAD_STATUSES or error.rate_limited


def backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before try number `attempt` + 1: the server's word, else exponential with jitter."""
    if retry_after is not None and retry_after > 0:
        return min(retry_after, MAX_RETRY_AFTER)
    return float(min(BACKOFF_MAX, BACKOFF_BASE * 2.0**attempt) * (0.5 + random.random() / 2))


async def run_call(
    limiter: AdaptiveLimiter,
    call: Callable[[], Awaitable[LMResponse]],
    on_cut: Callable[[int], Awaitable[None]] | None = None,
    deadline: float | None = None,
) -> LMResponse:
    """Make one model call within the endpoint's limit, retrying overloads without holding a slot.

    Args:
        limiter: The endpoint's limiter.
        call: Makes the request (called once per try).
        on_cut: Awaited with the new limit after each cut (for events).
        deadline: The run's deadline (a `time.monotonic()` instant; None: none), also seen by the client
            (`core/lm/deadline.py`).

    Returns:
        The call's result.

    Raises:
        ModelError: The last failure, once the retries are spent or the failure is not retryable;
            `DeadlineExceeded` when the wait before the next try would end past `deadline`.
    """
    with call_deadline(deadline):
        return await _run_call(limiter, call, on_cut)


async def _run_call(
    limiter: AdaptiveLimiter,
    call: Callable[[], Awaitable[LMResponse]],
    on_cut: Callable[[int], Awaitable[None]] | None,
) -> LMResponse:
    attempt = 0
    while True:
        epoch = await limiter.acquire()
        try:
            result = await call()
        except ModelError as error:
            overload = is_overload(error)
            cut = overload and limiter.overloaded(epoch)  # before release: this call was in flight too
            limiter.release()
            if cut and on_cut is not None:
                await on_cut(limiter.limit)
            allowed = OVERLOAD_RETRIES if overload else OTHER_RETRIES if error.retryable else 0
            if attempt >= allowed or isinstance(error, DeadlineExceeded):
                raise
            if error.retry_after is not None and error.retry_after > MAX_RETRY_AFTER:
                check_wait(error.retry_after, error, asked=True)  # past the deadline says more than "too long"
                raise ModelError(
                    f"{error}; not retried: the server asked to wait {seconds(error.retry_after)} s, "
                    f"longer than {MAX_RETRY_AFTER:g} s",
                    model=error.model,
                    status_code=error.status_code,
                    retry_after=error.retry_after,
                    rate_limited=error.rate_limited,
                ) from error
            wait = backoff(attempt, error.retry_after)
            check_wait(wait, error, asked=bool(error.retry_after))
            await asyncio.sleep(wait)
            attempt += 1
            continue
        except BaseException:
            limiter.release()
            raise
        cut = result.near_rate_limit and limiter.overloaded(epoch)
        limiter.release()
        if cut and on_cut is not None:
            await on_cut(limiter.limit)
        elif not result.near_rate_limit:
            limiter.succeeded()
        return result
