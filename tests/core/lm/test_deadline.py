"""No retry wait of the engine or of a client passes the run's deadline (`core/lm/deadline.py`)."""

from __future__ import annotations

import asyncio
import time

import pytest

from rlm_adapters.core.lm._retry import Failure, RetryPolicy, call_with_retries
from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.lm.deadline import DeadlineExceeded, bounded, call_deadline, current_deadline, time_left
from rlm_adapters.core.lm.limiter import AdaptiveLimiter, run_call
from rlm_adapters.errors import ModelError


def limited(retry_after: float | None) -> ModelError:
    return ModelError("slow down", model="m", status_code=429, retry_after=retry_after)


async def test_the_deadline_is_seen_inside_the_call_and_gone_after() -> None:
    seen: list[float | None] = []

    async def call() -> LMResponse:
        seen.append(current_deadline())
        return LMResponse(text="ok", input_tokens=1, output_tokens=1, model="m")

    deadline = time.monotonic() + 30
    await run_call(AdaptiveLimiter(4), call, deadline=deadline)
    assert seen == [deadline]
    assert current_deadline() is None
    with call_deadline(time.monotonic() + 5):
        assert 4 < (time_left() or 0) <= 5
        assert bounded(600) <= 5 and bounded(1) == 1


async def test_an_overload_whose_wait_passes_the_deadline_fails_at_once() -> None:
    calls = 0

    async def call() -> LMResponse:
        nonlocal calls
        calls += 1
        raise limited(99999999)

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"99,999,999 s as the server asked \(Retry-After\)"):
        await run_call(AdaptiveLimiter(4), call, deadline=time.monotonic() + 5)
    assert calls == 1 and time.monotonic() - started < 1


async def test_a_backoff_that_fits_is_waited_and_one_that_does_not_is_not() -> None:
    answers = [limited(0.2), LMResponse(text="ok", input_tokens=1, output_tokens=1, model="m")]

    async def call() -> LMResponse:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert (await run_call(AdaptiveLimiter(4), call, deadline=time.monotonic() + 5)).text == "ok"

    async def always() -> LMResponse:
        raise limited(2.0)

    with pytest.raises(DeadlineExceeded, match=r"deadline, 0\.[0-9]+ s away"):
        await run_call(AdaptiveLimiter(4), always, deadline=time.monotonic() + 0.5)


async def test_without_a_deadline_a_pause_over_a_minute_is_not_waited() -> None:
    async def call() -> LMResponse:
        raise limited(3600)

    started = time.monotonic()
    with pytest.raises(ModelError, match="longer than 60 s") as info:
        await run_call(AdaptiveLimiter(4), call)
    assert not isinstance(info.value, DeadlineExceeded)
    assert time.monotonic() - started < 1


async def test_client_retries_never_sleep_past_the_deadline() -> None:
    attempts = 0

    async def attempt() -> str:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("overloaded")

    def classify(_exc: Exception) -> Failure:
        return Failure("overloaded", status=429, retryable=True, retry_after=0.3)

    started = time.monotonic()
    policy = RetryPolicy(max_retries=5)
    with call_deadline(started + 0.75), pytest.raises(DeadlineExceeded, match="Test call to model 'm'"):
        await call_with_retries(attempt, policy=policy, classify=classify, provider="Test", model="m")
    assert attempts == 3  # two waits of 0.3 s fit; the third would have ended past the deadline
    assert time.monotonic() - started < 0.75


async def test_a_whole_attempt_is_bounded_even_when_each_read_is_quick() -> None:
    async def trickle() -> str:
        for _ in range(100):
            await asyncio.sleep(0.05)  # each "read" is quick; all of them are not
        return "never"

    started = time.monotonic()
    with pytest.raises(ModelError, match=r"per-request timeout of 0\.3 s") as info:
        await call_with_retries(
            trickle, policy=RetryPolicy(request_timeout=0.3), classify=lambda e: None, provider="Test", model="m"
        )
    assert info.value.retryable
    assert time.monotonic() - started < 1
