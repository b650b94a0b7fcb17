"""Every provider backend through a full RLM run, with its real SDK talking over a socket to a local server that
speaks that provider's wire format: root and sub-model on the provider, success, usage counted once per call,
429 then success, 500, timeout and a malformed body."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.lm import _retry, limiter
from rlm_adapters.core.pricing import PriceTable
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.testing import FakeModelServer

from .providers import PROVIDERS, Provider, installed_provider

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM must not fetch prices at import

ROOT = ["```repl\nanswer = llm_query(context)\nprint(answer)\n```", "FINAL_VAR(answer)"]
CONTEXT = "The magic number is 4242."


@pytest.fixture(params=PROVIDERS, ids=[p.name for p in PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    return installed_provider(request)


@pytest.fixture
def server(provider: Provider) -> Iterator[FakeModelServer]:
    with provider.server(root=ROOT) as running:
        yield running


def build(provider: Provider, server: FakeModelServer, *, client_retries: int | None = None, **overrides: Any) -> RLM:
    """An RLM with root and sub on the provider; ``client_retries`` None leaves retrying to the engine.

    A failed run returns its result (``raise_on_error=False``): these tests read what it says and what it spent
    (`tests/issues/test_51_failed_run_raises.py` holds the default, which raises it).
    """
    retries = {} if client_retries is None else {"max_retries": client_retries}
    settings = {**provider.settings(server), "timeout": 30, **retries, **overrides}
    return RLM(
        backend=provider.name,
        backend_kwargs={"model_name": provider.root, **settings},
        other_backends=[provider.name],
        other_backend_kwargs=[{"model_name": provider.sub, **settings}],
        environment="local",
        max_iterations=4,
        raise_on_error=False,
    )


def expected_cost(provider: Provider, model: str, input_tokens: int, output_tokens: int) -> float:
    if provider.name == "litellm":
        import litellm

        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=input_tokens, completion_tokens=output_tokens
        )
        return float(prompt + completion)
    return PriceTable().cost(model, input_tokens, output_tokens)


def test_root_and_sub_on_the_provider(provider: Provider, server: FakeModelServer) -> None:
    result = build(provider, server).completion(CONTEXT, "What is the magic number?")

    assert (result.finish_reason, result.response) == ("final", "4242"), result.error
    usage = result.usage_summary
    # Usage is counted once per call, from what the provider reported.
    assert (usage.root.calls, usage.sub.calls) == (2, 1)
    assert (server.counters.root_requests, server.counters.leaf_requests) == (2, 1)
    assert usage.total.input_tokens == server.counters.prompt_tokens
    assert usage.total.output_tokens == server.counters.completion_tokens
    assert set(usage.by_model) == {provider.root, provider.sub}
    # LiteLLM sends the model without its routing prefix ("openai/").
    wire_sub = provider.sub.rsplit("/", 1)[-1] if provider.name == "litellm" else provider.sub
    assert server.counters.by_model[wire_sub] == 1
    for model, part in usage.by_model.items():
        assert part.cost == pytest.approx(expected_cost(provider, model, part.input_tokens, part.output_tokens))
    assert usage.total_cost > 0
    # The real SDK sent the provider's own authentication.
    name, expected = provider.auth
    assert all(expected in headers.get(name, "") for headers in server.headers_log), server.headers_log


@pytest.mark.parametrize("client_retries", [None, 1], ids=["engine-retries", "client-retries"])
def test_a_429_is_retried_and_counted_once(
    provider: Provider, server: FakeModelServer, client_retries: int | None
) -> None:
    server.fail_next(429, message="slow down")
    result = build(provider, server, client_retries=client_retries).completion(CONTEXT, "What is the magic number?")

    assert (result.finish_reason, result.response) == ("final", "4242"), result.error
    assert server.counters.faults_served == 1
    assert server.counters.requests == 4
    assert result.usage_summary.total.calls == 3  # the refused attempt is not a call


def test_the_engine_waits_what_retry_after_says(
    provider: Provider, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[float | None] = []

    def record(attempt: int, retry_after: float | None) -> float:
        asked.append(retry_after)
        return 0.0

    monkeypatch.setattr(limiter, "backoff", record)
    server.fail_next(429, retry_after="7")
    result = build(provider, server).completion(CONTEXT, "What is the magic number?")

    assert result.response == "4242", result.error
    assert asked == [7.0]  # the provider's Retry-After reached the engine through the SDK and the ModelError


def test_a_client_that_retries_waits_what_retry_after_says(
    provider: Provider, server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(_retry, "_sleep", record)
    server.fail_next(429, retry_after="7")
    result = build(provider, server, client_retries=1).completion(CONTEXT, "What is the magic number?")

    assert result.response == "4242", result.error
    assert waits == [7.0]


@pytest.mark.parametrize(("client_retries", "attempts"), [(None, 3), (1, 2)], ids=["engine-retries", "client-retries"])
def test_a_500_that_persists_ends_the_run_with_the_providers_message(
    provider: Provider, server: FakeModelServer, client_retries: int | None, attempts: int
) -> None:
    server.fail_next(500, count=attempts, message="the model is on fire")
    result = build(provider, server, client_retries=client_retries).completion(CONTEXT, "What is the magic number?")

    assert result.finish_reason == "error"
    assert "the model is on fire" in str(result.error)
    assert "500" in str(result.error)
    assert f"{provider.label} call to model {provider.root!r}" in str(result.error)
    # The engine tries 1 + 2 times; a client given max_retries=1 tries twice and the engine adds none.
    assert server.counters.faults_served == attempts
    assert server.counters.requests == attempts
    assert result.usage_summary.total.calls == 0


def test_a_request_that_never_answers_times_out(provider: Provider, server: FakeModelServer) -> None:
    # A first run warms the SDK up (imports, lazy set-up), so that the short timeout below times the request.
    assert build(provider, server).completion(CONTEXT, "q").response == "4242"
    server.reset_counters()
    server.hang_next()
    result = build(provider, server, timeout=1.0, client_retries=0).completion(CONTEXT, "What is the magic number?")

    assert result.finish_reason == "error"
    assert "time" in str(result.error).lower()
    assert server.counters.requests == 1


@pytest.mark.parametrize("body", [b"this is not json", b'{"unexpected": ["shape"]}'], ids=["not-json", "wrong-shape"])
def test_a_malformed_body_is_a_model_error(provider: Provider, server: FakeModelServer, body: bytes) -> None:
    server.garbage_next(body=body)
    result = build(provider, server, client_retries=0).completion(CONTEXT, "What is the magic number?")

    assert result.finish_reason == "error"
    assert f"{provider.label} call to model {provider.root!r}" in str(result.error)
    assert result.usage_summary.total.calls == 0


def test_an_unknown_setting_is_refused_when_the_rlm_is_built(provider: Provider, server: FakeModelServer) -> None:
    with pytest.raises(ConfigurationError, match="'temprature'"):
        build(provider, server, temprature=0.3)
    assert server.counters.requests == 0
