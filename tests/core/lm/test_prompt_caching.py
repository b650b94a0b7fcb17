"""Providers' prompt caches: where the Anthropic clients put breakpoints, and how every client reads the cache's
tokens from usage, through the real SDKs against the local wire fakes; the run's usage and cost follow the bill."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest

from rlm_adapters import RLM, Event, RootCall
from rlm_adapters.core.engine.budget import Limits
from rlm_adapters.core.lm import Message
from rlm_adapters.core.pricing import PriceTable
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.testing import FakeAnthropicServer, FakeBedrockServer, FakeGeminiServer, FakeOpenAIServer
from rlm_adapters.testing._server import Response

from .extras import installed, needs, needs_boto3

needs_anthropic = needs("anthropic", "anthropic")
MODEL = "claude-haiku-4-5"  # $1 in, $5 out; cache reads $0.10, writes $1.25 per million tokens
STEPS = 8
ROOT = [f"```repl\nprint('step {i}: ' + 'y' * 600)\n```" for i in range(STEPS)] + ["FINAL(done)"]
HISTORY: list[Message] = [
    {"role": "system", "content": "you are a root model"},
    {"role": "user", "content": "context described"},
    {"role": "assistant", "content": "code 1"},
    {"role": "user", "content": "output 1"},
    {"role": "assistant", "content": "code 2"},
    {"role": "user", "content": "output 2"},
]


def root_calls() -> tuple[list[RootCall], Callable[[Event], None]]:
    seen: list[RootCall] = []

    def record(event: Event) -> None:
        if isinstance(event, RootCall):
            seen.append(event)

    return seen, record


def anthropic_rlm(server: FakeAnthropicServer, **kwargs: Any) -> RLM:
    settings = {"model_name": MODEL, "base_url": server.url, "api_key": "sk-ant", "max_retries": 0, "max_tokens": 256}
    return RLM(backend="anthropic", backend_kwargs={**settings, **kwargs}, environment="local", max_depth=0)


def cache_marks(body: dict[str, Any]) -> list[str]:
    """Where a Messages API request carries ``cache_control``: ``system`` or ``messages.N``."""
    marks = [f"system.{i}" for i, b in enumerate(body.get("system") or []) if "cache_control" in b]
    for index, turn in enumerate(body["messages"]):
        if isinstance(turn["content"], list):
            marks += [f"messages.{index}" for block in turn["content"] if "cache_control" in block]
    return marks


@needs_anthropic
async def test_anthropic_marks_the_system_prompt_and_the_history_prefix() -> None:
    import httpx2

    from rlm_adapters.core.lm.anthropic_client import AnthropicClient

    bodies: list[dict[str, Any]] = []
    reply = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 3,
            "output_tokens": 1,
            "cache_read_input_tokens": 50,
            "cache_creation_input_tokens": 7,
        },
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return httpx2.Response(200, json=reply)

    def client(**kwargs: Any) -> AnthropicClient:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
        return AnthropicClient(MODEL, api_key="k", http_client=http, max_retries=0, **kwargs)

    response = await client().acomplete(HISTORY)
    # The system prompt, the last message, and the one that was last in the previous call (two back).
    assert cache_marks(bodies[-1]) == ["system.0", "messages.2", "messages.4"]
    assert bodies[-1]["messages"][3] == {"role": "assistant", "content": "code 2"}  # unmarked turns stay strings
    # Anthropic's input_tokens leave the cache out; ours count the whole prompt, the cache's part apart.
    assert (response.input_tokens, response.cache_read_tokens, response.cache_write_tokens) == (60, 50, 7)

    await client().acomplete([{"role": "user", "content": "one llm_query prompt"}])
    assert cache_marks(bodies[-1]) == [] and "system" not in bodies[-1]  # nothing would ever re-read it
    await client().acomplete([*HISTORY[:3], {"role": "user", "content": ""}, *HISTORY[4:]])
    assert cache_marks(bodies[-1]) == ["system.0", "messages.4"]  # an empty text cannot carry a breakpoint
    await client(prompt_caching=False).acomplete(HISTORY)
    assert cache_marks(bodies[-1]) == [] and bodies[-1]["system"] == "you are a root model"
    with pytest.raises(ConfigurationError, match="prompt_caching='yes' must be True or False"):
        client(prompt_caching="yes")


@needs_anthropic
def test_each_root_turn_reads_every_earlier_turn_from_the_cache_and_pays_its_bill() -> None:
    calls, record = root_calls()
    with FakeAnthropicServer(root=ROOT, min_cache_tokens=256) as server:
        result = anthropic_rlm(server).completion("the context " * 50, "q", callbacks=[record])
    assert (result.finish_reason, result.response) == ("final", "done"), result.error
    assert len(calls) == STEPS + 1
    assert calls[0].cache_read_tokens == 0 and calls[0].cache_write_tokens == calls[0].input_tokens
    for previous, call in itertools.pairwise(calls):
        # Iteration N re-reads the whole prompt of iteration N-1 (every earlier turn) and writes only what is new.
        assert call.cache_read_tokens == previous.input_tokens
        assert call.cache_write_tokens == call.input_tokens - previous.input_tokens
    bill = server.cache.bill
    root = result.usage_summary.root
    assert (root.cache_read_tokens, root.cache_write_tokens) == (bill.cache_read_tokens, bill.cache_write_5m_tokens)
    assert root.input_tokens == bill.input_tokens + bill.cache_read_tokens + bill.cache_write_5m_tokens
    # The run's cost is the fake's bill at the list prices: input 0.1x read, 1.25x written.
    assert result.cost == pytest.approx(bill.input_cost(1.0) + root.output_tokens * 5.0 / 1e6)
    assert result.cost == pytest.approx(sum(c.cost for c in calls))
    totals = result.usage_summary.to_dict()["total"]
    assert (totals["cache_read_tokens"], totals["cache_write_tokens"]) == (
        bill.cache_read_tokens,
        root.cache_write_tokens,
    )
    assert result.usage_summary.to_dict()["by_model"][MODEL]["cache_read_tokens"] == bill.cache_read_tokens


@needs_anthropic
def test_the_budget_counts_the_cached_price() -> None:
    with FakeAnthropicServer(root=ROOT, min_cache_tokens=256) as server:
        cached = anthropic_rlm(server).completion("the context " * 50, "q")
    root = cached.usage_summary.root
    uncached_cost = (root.input_tokens * 1.0 + root.output_tokens * 5.0) / 1e6
    largest_input = (root.input_tokens / root.calls) * 2 * 1.0 / 1e6
    cap = cached.cost + largest_input
    assert cap < uncached_cost  # the cap lies between what the run costs with the cache and without
    with FakeAnthropicServer(root=ROOT, min_cache_tokens=256) as server:
        rlm = anthropic_rlm(server)
        rlm.limits = Limits(max_cost=cap)
        assert rlm.completion("the context " * 50, "q").finish_reason == "final"
    with FakeAnthropicServer(root=ROOT, min_cache_tokens=256) as server:
        rlm = anthropic_rlm(server, prompt_caching=False)
        rlm.limits = Limits(max_cost=cap)
        assert rlm.completion("the context " * 50, "q").finish_reason == "budget"
        assert server.cache.bill.cache_read_tokens == 0


@needs_boto3
@pytest.mark.parametrize(
    ("model", "cached"), [("us.anthropic.claude-haiku-4-5-20251001-v1:0", True), ("amazon.nova-pro-v1:0", False)]
)
def test_bedrock_sends_cache_points_to_claude_models_and_reads_their_usage(model: str, cached: bool) -> None:
    calls, record = root_calls()
    with FakeBedrockServer(root=[*ROOT[:3], "FINAL(done)"], min_cache_tokens=256) as server:
        rlm = RLM(
            backend="bedrock",
            backend_kwargs={
                "model_name": model,
                "endpoint_url": server.url,
                "region_name": "us-east-1",
                "aws_access_key_id": "AKIAFAKE",
                "aws_secret_access_key": "secret",
            },
            environment="local",
            max_depth=0,
        )
        result = rlm.completion("the context " * 50, "q", callbacks=[record])
    assert result.finish_reason == "final", result.error
    bill = server.cache.bill
    assert (bill.cache_read_tokens > 0) is cached
    assert [c.cache_read_tokens > 0 for c in calls] == [False, *[cached] * (len(calls) - 1)]
    root = result.usage_summary.root
    assert (root.cache_read_tokens, root.cache_write_tokens) == (bill.cache_read_tokens, bill.cache_write_5m_tokens)
    assert root.input_tokens == bill.input_tokens + bill.cache_read_tokens + bill.cache_write_5m_tokens
    prices = PriceTable()
    expected = prices.cost(
        model, root.input_tokens, root.output_tokens, root.cache_read_tokens, root.cache_write_tokens
    )
    assert result.cost == pytest.approx(expected)


class CachingOpenAIServer(FakeOpenAIServer):
    """The OpenAI fake, reporting that its automatic prompt cache served part of each prompt."""

    cached = 40

    async def _complete(self, request: dict[str, Any]) -> Response:
        status, payload, raw, headers = await super()._complete(request)
        if status == 200:
            payload["usage"]["prompt_tokens_details"] = {"cached_tokens": self.cached, "audio_tokens": 0}
        return status, payload, raw, headers


class CachingGeminiServer(FakeGeminiServer):
    """The Gemini fake, reporting implicit-cache hits (``cachedContentTokenCount``)."""

    cached = 40

    async def route(self, method: str, path: str, body: bytes) -> Response:
        status, payload, raw, headers = await super().route(method, path, body)
        if status == 200:
            payload["usageMetadata"]["cachedContentTokenCount"] = self.cached
        return status, payload, raw, headers


OPENAI_WIRE = [
    ("openai", CachingOpenAIServer, "gpt-5-mini", lambda s: {"base_url": s.base_url, "api_key": "k"}),
    (
        "azure_openai",
        CachingOpenAIServer,
        "gpt-5-mini",
        lambda s: {"azure_endpoint": s.url, "api_version": "2024-10-21", "api_key": "k"},
    ),
    ("gemini", CachingGeminiServer, "gemini-2.5-flash", lambda s: {"base_url": s.url, "api_key": "k"}),
]


@pytest.mark.parametrize(("backend", "server_class", "model", "settings"), OPENAI_WIRE, ids=[w[0] for w in OPENAI_WIRE])
def test_cached_prompt_tokens_are_read_from_usage_and_priced_at_the_cache_rate(
    backend: str, server_class: type[Any], model: str, settings: Callable[[Any], dict[str, Any]]
) -> None:
    if backend == "gemini" and not installed("google.genai"):
        pytest.skip('needs google.genai (pip install "rlm-adapters[gemini]")')
    with server_class(root=["FINAL(done)"]) as server:
        rlm = RLM(
            backend=backend, backend_kwargs={"model_name": model, **settings(server)}, environment="local", max_depth=0
        )
        result = rlm.completion("the context", "q")
    assert result.finish_reason == "final", result.error
    root = result.usage_summary.root
    assert root.cache_read_tokens == 40 and root.cache_write_tokens == 0
    read_price = PriceTable().cache_price(model)
    in_price, out_price = PriceTable().price(model) or (0, 0)
    assert read_price is not None and read_price[0] == pytest.approx(in_price * 0.1)
    expected = ((root.input_tokens - 40) * in_price + 40 * read_price[0] + root.output_tokens * out_price) / 1e6
    assert result.cost == pytest.approx(expected)
