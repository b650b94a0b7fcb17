"""Adaptive concurrency: the AIMD limiter on its own, then against a server that refuses past N in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.events import ConcurrencyCut, Event
from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.lm.limiter import DECREASE, DEFAULT_CEILING, DEFAULT_START, AdaptiveLimiter, backoff, run_call
from rlm_adapters.core.lm.openai_client import out_of_requests, retry_after_seconds
from rlm_adapters.errors import ModelError
from rlm_adapters.testing import FakeOpenAIServer


def reply(text: str = "ok", near_rate_limit: bool = False) -> LMResponse:
    return LMResponse(text=text, input_tokens=1, output_tokens=1, model="m", near_rate_limit=near_rate_limit)


async def test_slow_start_doubles_until_the_ceiling() -> None:
    limiter = AdaptiveLimiter(ceiling=100, start=4)
    for _ in range(4):
        await limiter.acquire()
    for _ in range(4):
        limiter.release()
        limiter.succeeded()
    assert limiter.limit == 8
    for _ in range(500):
        limiter.succeeded()
    assert limiter.limit == 100


async def test_one_cut_per_round_trip_then_additive_growth() -> None:
    limiter = AdaptiveLimiter(ceiling=64, start=64)
    epochs = [await limiter.acquire() for _ in range(64)]
    # 48 calls of the same round trip come back overloaded: only the first one cuts.
    cuts = 0
    for epoch in epochs[:48]:
        cuts += limiter.overloaded(epoch)
        limiter.release()
    assert cuts == 1
    assert limiter.limit == int(64 * DECREASE)
    # A call that left after the cut may cut again, by at most the cut of half the limit.
    later = await limiter.acquire()
    wide = limiter.limit
    assert limiter.overloaded(later)
    limiter.release()
    assert limiter.limit == max(1, int(wide / 2 * DECREASE))
    # After an overload, growth is about one call per round trip, not one per call.
    before = limiter.limit
    for _ in range(before):
        limiter.succeeded()
    assert limiter.limit in (before, before + 1)


async def test_waiters_are_served_in_order_and_cancellation_keeps_no_slot() -> None:
    limiter = AdaptiveLimiter(ceiling=1, start=1)
    await limiter.acquire()
    order: list[int] = []

    async def take(n: int) -> None:
        await limiter.acquire()
        order.append(n)
        limiter.release()

    first = asyncio.create_task(take(1))
    cancelled = asyncio.create_task(take(2))
    last = asyncio.create_task(take(3))
    await asyncio.sleep(0)
    cancelled.cancel()
    limiter.release()
    await asyncio.gather(first, last)
    assert order == [1, 3]
    assert limiter.in_flight == 0
    with pytest.raises(asyncio.CancelledError):
        await cancelled


async def test_run_call_retries_an_overload_without_holding_a_slot_and_reports_the_cut() -> None:
    limiter = AdaptiveLimiter(ceiling=8, start=8)
    tries = 0
    cuts: list[int] = []

    async def call() -> LMResponse:
        nonlocal tries
        tries += 1
        if tries == 1:
            assert limiter.in_flight == 1
            raise ModelError("slow down", model="m", status_code=429, retry_after=0.0)
        return reply("second time")

    async def on_cut(limit: int) -> None:
        cuts.append(limit)
        assert limiter.in_flight == 0  # the slot was given back before waiting

    assert (await run_call(limiter, call, on_cut)).text == "second time"
    # One stray 429 with one call in flight cuts the limit by the half-limit floor, not down to 1.
    assert tries == 2 and cuts == [int(8 / 2 * DECREASE)]


async def test_run_call_gives_up_on_errors_that_are_not_retryable() -> None:
    limiter = AdaptiveLimiter(ceiling=4)
    tries = 0

    async def call() -> LMResponse:
        nonlocal tries
        tries += 1
        raise ModelError("bad key", model="m", status_code=401)

    with pytest.raises(ModelError, match="bad key"):
        await run_call(limiter, call)
    assert tries == 1 and limiter.in_flight == 0


async def test_exhausted_rate_limit_headers_cut_the_limit_without_failing_the_call() -> None:
    limiter = AdaptiveLimiter(ceiling=32, start=32)

    async def call() -> LMResponse:
        return reply("last one", near_rate_limit=True)

    assert (await run_call(limiter, call)).text == "last one"
    assert limiter.limit < 32 and limiter.decreases == 1


def test_retry_after_headers_are_read_in_every_form() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # a date in the past
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    assert out_of_requests({"x-ratelimit-remaining-requests": "0"})
    assert not out_of_requests({"x-ratelimit-remaining-requests": "17"})


def test_backoff_honours_the_server_and_is_bounded() -> None:
    assert backoff(0, 2.5) == 2.5
    assert backoff(0, 600.0) == 60.0
    assert all(0 < backoff(n, None) <= 8.0 for n in range(20))


@pytest.mark.parametrize("allowed", [5, 20, 60])
async def test_limit_settles_near_an_endpoints_capacity_and_no_call_is_lost(allowed: int) -> None:
    """An endpoint that refuses (429) whatever arrives past `allowed` in flight, as a provider's cap does."""
    limiter = AdaptiveLimiter(ceiling=256)
    in_flight = 0
    refused = 0
    limits: list[int] = []

    async def endpoint() -> LMResponse:
        nonlocal in_flight, refused
        if in_flight >= allowed:
            refused += 1
            raise ModelError("too many", model="m", status_code=429, retry_after=0.001)
        in_flight += 1
        try:
            await asyncio.sleep(0.002)
        finally:
            in_flight -= 1
        limits.append(limiter.limit)
        return reply()

    answers = await asyncio.gather(*(run_call(limiter, endpoint) for _ in range(3000)))
    assert len(answers) == 3000 and all(a.text == "ok" for a in answers)  # nothing lost
    settled = sorted(limits[len(limits) // 2 :])
    median = settled[len(settled) // 2]
    assert allowed * DECREASE * 0.8 <= median <= allowed * 1.3, (median, refused)
    assert refused < 3000  # the limit came down: most calls were not refused


def test_engine_loses_no_call_against_a_server_that_refuses_past_its_limit() -> None:
    n, allowed = 100, 16
    root = [f"```repl\nanswers = llm_query_batched([f'item {{i}}' for i in range({n})])\nFINAL_VAR('answers')\n```"]
    events: list[Event] = []
    # 0.1 s a reply: the batch's requests go out one per loop iteration (core/lm/_build_turns.py), so at 0.01 s
    # the first replies came back before the 17th request was sent and the server never had to refuse.
    with FakeOpenAIServer(root=root, latency=0.1, max_in_flight=allowed, retry_after=0.01) as server:
        options: dict[str, Any] = {"model_name": "m", "base_url": server.base_url, "api_key": "k"}
        result = RLM(
            backend="openai", backend_kwargs=options, max_iterations=3, environment="local", callbacks=[events.append]
        ).completion("ctx", root_prompt="fan out")
        counters = server.counters
    assert result.finish_reason == "final"
    assert "[error" not in result.response
    assert counters.leaf_requests == n  # every prompt was answered once
    assert counters.rate_limited > 0  # the default start is above the limit, so the server said so
    cuts = [e for e in events if isinstance(e, ConcurrencyCut)]
    assert cuts and cuts[0].ceiling == 256 and cuts[0].endpoint == server.base_url
    assert [c.limit for c in cuts] == sorted((c.limit for c in cuts), reverse=True)


async def test_the_next_run_starts_from_what_the_endpoint_taught() -> None:
    first = AdaptiveLimiter(ceiling=256, endpoint="http://a/v1")
    assert first.limit == DEFAULT_START
    epoch = await first.acquire()
    first.overloaded(epoch)
    first.release()
    taught = first.limit
    assert AdaptiveLimiter(ceiling=256, endpoint="http://a/v1").limit == taught
    assert AdaptiveLimiter(ceiling=8, endpoint="http://a/v1").limit == min(8, taught)  # the ceiling still rules
    assert AdaptiveLimiter(ceiling=256, endpoint="http://b/v1").limit == DEFAULT_START


def test_the_words_about_max_concurrency_say_what_the_limiter_does() -> None:
    """RLM's docstring and the docs give the ceiling and the start the limiter really has (once 64 vs 128)."""
    assert RLM(backend=ScriptedModel(["FINAL(x)"])).max_concurrency == DEFAULT_CEILING
    assert AdaptiveLimiter(DEFAULT_CEILING).limit == DEFAULT_START < DEFAULT_CEILING
    assert AdaptiveLimiter(DEFAULT_START // 2).limit == DEFAULT_START // 2  # "or the ceiling, if lower"
    doc = " ".join((RLM.__doc__ or "").split())
    assert f"(default {DEFAULT_CEILING})" in doc and f"it starts at {DEFAULT_START} (or the ceiling, if lower" in doc
    docs = Path(__file__).parents[3] / "docs"
    backends = " ".join((docs / "backends.md").read_text(encoding="utf-8").split())
    assert (
        f"up to `max_concurrency` (default {DEFAULT_CEILING}) calls in flight, starting at {DEFAULT_START}," in backends
    )
    coming = " ".join((docs / "coming-from-rlms.md").read_text(encoding="utf-8").split())
    assert f"(at most {DEFAULT_CEILING} calls in flight per endpoint, adapting from {DEFAULT_START})" in coming
