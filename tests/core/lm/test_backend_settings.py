"""Provider backends' settings, retry rules and prices, without a full run (plus Bedrock's thread pool under load)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.lm import _retry
from rlm_adapters.core.lm._retry import Failure, RetryPolicy, call_with_retries, parse_retry_after
from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.lm.registry import make_client
from rlm_adapters.core.pricing import PriceTable
from rlm_adapters.errors import ConfigurationError, ModelError
from rlm_adapters.testing import FakeBedrockServer, FakeOpenAIServer

from .extras import needs_boto3, needs_genai, needs_litellm


# -- Retry-After and the retry loop ---------------------------------------------------------------
def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 < (parse_retry_after({"retry-after": in_a_minute}) or 0) <= 60
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


async def test_backoff_without_retry_after_then_the_providers_message() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def attempt() -> str:
        raise RuntimeError("overloaded")

    with pytest.raises(ModelError, match=r"failed with HTTP 503 after 3 attempts: overloaded") as caught:
        await call_with_retries(
            attempt,
            policy=RetryPolicy(max_retries=2, initial_delay=1.0),
            classify=lambda exc: Failure(str(exc), status=503, retryable=True),
            provider="P",
            model="m",
            sleep=sleep,
        )
    assert caught.value.status_code == 503
    assert len(waits) == 2 and 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0  # exponential, with jitter


async def test_a_client_error_is_not_retried_and_a_long_retry_after_is_not_waited() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise RuntimeError("bad")

    for failure in (Failure("bad", status=400), Failure("later", status=429, retryable=True, retry_after=3600)):
        calls = 0
        with pytest.raises(ModelError, match=str(failure.status)):
            await call_with_retries(
                attempt, policy=RetryPolicy(max_retries=3), classify=lambda _e, f=failure: f, provider="P", model="m"
            )
        assert calls == 1


@pytest.mark.parametrize(("given", "engine_may_retry"), [({}, True), ({"max_retries": 1}, False)])
async def test_without_max_retries_the_engine_gets_a_retryable_error_with_the_wait(
    given: dict[str, Any], engine_may_retry: bool
) -> None:
    policy = RetryPolicy.from_kwargs("gemini", dict(given))

    async def attempt() -> str:
        raise RuntimeError("busy")

    with pytest.raises(ModelError) as caught:
        await call_with_retries(
            attempt,
            policy=policy,
            classify=lambda _e: Failure("busy", status=500, retryable=True, retry_after=2.5),
            provider="P",
            model="m",
            sleep=lambda _s: asyncio.sleep(0),
        )
    assert (caught.value.status_code, caught.value.retry_after) == (500, 2.5)
    assert caught.value.retryable is engine_may_retry


async def test_an_exception_classify_does_not_know_fails_the_call_naming_its_type() -> None:
    # An SDK meeting a hostile reply raises what it raises (RecursionError for deeply nested JSON): that is the
    # call's failure, never an exception out of the run.
    async def attempt() -> str:
        raise RecursionError("maximum recursion depth exceeded")

    with pytest.raises(ModelError, match=r"P call to model 'm' failed: RecursionError: maximum recursion") as info:
        await call_with_retries(attempt, policy=RetryPolicy(), classify=lambda _e: None, provider="P", model="m")
    assert not info.value.retryable


@pytest.mark.parametrize("bad", [{"timeout": 0}, {"timeout": "10"}, {"max_retries": -1}, {"max_retries": 1.5}])
def test_bad_timeout_or_retries_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(bad))):
        RetryPolicy.from_kwargs("bedrock", dict(bad))


# -- missing settings say what to set ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("backend", "kwargs", "names"),
    [
        pytest.param("bedrock", {"model_name": "amazon.nova-pro-v1:0"}, "AWS_REGION", marks=needs_boto3),
        pytest.param("gemini", {"model_name": "gemini-2.5-flash"}, "GEMINI_API_KEY", marks=needs_genai),
        ("azure_openai", {"model_name": "gpt-5", "api_version": "2024-10-21", "api_key": "k"}, "AZURE_OPENAI_ENDPOINT"),
        ("azure_openai", {"model_name": "gpt-5", "azure_endpoint": "https://x", "api_key": "k"}, "OPENAI_API_VERSION"),
        (
            "azure_openai",
            {"model_name": "gpt-5", "azure_endpoint": "https://x", "api_version": "2024-10-21"},
            "AZURE_OPENAI_API_KEY",
        ),
        ("portkey", {"model_name": "gpt-5"}, "PORTKEY_API_KEY"),
        ("vercel", {"model_name": "openai/gpt-5"}, "AI_GATEWAY_API_KEY"),
        ("openrouter", {"model_name": "anthropic/claude-sonnet-4.5"}, "OPENROUTER_API_KEY"),
        pytest.param("bedrock", {"region_name": "us-east-1"}, "model_name", marks=needs_boto3),
    ],
)
def test_missing_settings_name_what_to_set(
    backend: str, kwargs: dict[str, Any], names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in (
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "OPENAI_API_VERSION",
        "AZURE_OPENAI_API_VERSION",
        "PORTKEY_API_KEY",
        "AI_GATEWAY_API_KEY",
        "OPENROUTER_API_KEY",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")  # no region from the machine's ~/.aws/config
    with pytest.raises(ConfigurationError, match=names):
        RLM(backend=backend, backend_kwargs=kwargs)


@needs_genai
def test_gemini_settings_of_the_wrong_type_are_refused_at_construction() -> None:
    with pytest.raises(ConfigurationError, match="temperature"):
        make_client("gemini", {"model_name": "gemini-2.5-flash", "api_key": "k", "temperature": "warm"})


async def test_azure_entra_id_token_provider_is_used() -> None:
    async def token() -> str:
        return "entra-token"

    with FakeOpenAIServer(root=["FINAL(x)"]) as server:
        client = make_client(
            "azure_openai",
            {
                "model_name": "gpt-5-mini",
                "azure_endpoint": server.url,
                "api_version": "2024-10-21",
                "azure_ad_token_provider": token,
            },
        )
        reply = await client.acomplete([{"role": "user", "content": "magic number 777"}])
        await client.aclose()
    assert reply.text == "777"
    assert server.headers_log[0]["authorization"] == "Bearer entra-token"
    assert server.headers_log[0]["path"].startswith("/openai/deployments/gpt-5-mini/chat/completions?api-version=")


# -- Bedrock: boto3 in a thread pool ----------------------------------------------------------------
@needs_boto3
@pytest.mark.parametrize("workers", [1, 4])
def test_bedrock_runs_sub_calls_concurrently_up_to_its_pool(workers: int) -> None:
    root = ["```repl\nanswers = llm_query_batched([context] * 4)\n```", "FINAL_VAR(answers)"]
    # Leaf requests wait so that the batch overlaps; the root's do not.
    with FakeBedrockServer(root=root, latency=0.5, root_latency=0.0) as server:
        settings = {
            "region_name": "us-east-1",
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": "x",
            "endpoint_url": server.url,
            "max_workers": workers,
        }
        result = RLM(
            backend="bedrock",
            backend_kwargs={"model_name": "amazon.nova-pro-v1:0", **settings},
            other_backends=["bedrock"],
            other_backend_kwargs=[{"model_name": "amazon.nova-lite-v1:0", **settings}],
            environment="local",
        ).completion("The magic number is 4242.", "q")
    assert json.loads(result.response) == ["4242"] * 4, result.error
    assert server.counters.peak_in_flight == workers


# -- prices ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "price"),
    [
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", (3.0, 15.0)),
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", (1.0, 5.0)),
        ("amazon.nova-pro-v1:0", (0.80, 3.20)),
        ("gemini-2.5-flash-lite", (0.10, 0.40)),
        ("models/gemini-2.5-pro", (1.25, 10.0)),
        ("openai/gpt-5-mini", (0.25, 2.0)),
        ("anthropic/claude-sonnet-4.5", (3.0, 15.0)),
        ("gpt-5-mini-2025-08-07", (0.25, 2.0)),
    ],
)
def test_prices_match_the_providers_spellings(model: str, price: tuple[float, float]) -> None:
    assert PriceTable().price(model) == price


def test_an_unpriced_model_costs_nothing_and_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    from rlm_adapters import ScriptedModel

    def run(model: str, max_cost: float | None) -> float:
        client = ScriptedModel(["FINAL(ok)"], model_name=model)
        result = RLM(backend=client, environment="local", max_cost=max_cost).completion("c", "q")
        assert result.usage_summary.total.input_tokens > 0  # tokens are still counted
        return result.usage_summary.total_cost

    with caplog.at_level(logging.INFO, logger="rlm_adapters.pricing"):
        assert run("my-private-model-7", max_cost=1.0) == 0.0
        assert run("my-private-model-7", max_cost=1.0) == 0.0
        assert run("my-local-model-8", max_cost=None) == 0.0
    records = [(r.levelno, r.getMessage().split(":")[0]) for r in caplog.records]
    assert records == [
        (logging.WARNING, "no price known for model 'my-private-model-7'"),  # a cap is set: it matters
        (logging.INFO, "no price known for model 'my-local-model-8'"),
    ]


def test_a_providers_own_cost_wins_over_the_table() -> None:
    from rlm_adapters import ScriptedModel

    priced = LMResponse(text="FINAL(ok)", input_tokens=10, output_tokens=5, model="gpt-5", cost=0.125)
    result = RLM(backend=ScriptedModel(lambda _m: priced), environment="local").completion("c", "q")
    assert result.usage_summary.total_cost == pytest.approx(0.125)


def test_asyncio_sleep_is_the_default_pause() -> None:
    assert _retry._sleep is asyncio.sleep


def test_bedrock_turns_are_sent_as_converse_accepts_them() -> None:
    from rlm_adapters.core.lm.bedrock_client import merge_turns

    turns = merge_turns(
        [
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": ""},
        ]
    )
    assert turns == [
        {"role": "user", "content": [{"text": "(continue)"}]},
        {"role": "assistant", "content": [{"text": "hello"}]},
        {"role": "user", "content": [{"text": "a"}, {"text": "b"}]},
        {"role": "assistant", "content": [{"text": "(empty)"}]},
    ]


@needs_boto3
async def test_the_bedrock_server_refuses_what_bedrock_refuses() -> None:
    import boto3
    from botocore.exceptions import ClientError

    with FakeBedrockServer() as server:
        client = boto3.client(
            "bedrock-runtime",
            region_name="us-east-1",
            endpoint_url=server.url,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="x",
        )
        for messages in (
            [{"role": "user", "content": [{"text": "a"}]}, {"role": "user", "content": [{"text": "b"}]}],
            [{"role": "user", "content": [{"text": " "}]}],
            [{"role": "assistant", "content": [{"text": "a"}]}],
        ):
            with pytest.raises(ClientError, match="ValidationException"):
                client.converse(modelId="m", messages=messages)
        client.close()


@needs_genai
def test_gemini_on_vertex_ai_with_google_credentials() -> None:
    from google.oauth2.credentials import Credentials

    from rlm_adapters.testing import FakeGeminiServer

    root = ["```repl\nanswer = llm_query(context)\n```", "FINAL_VAR(answer)"]
    with FakeGeminiServer(root=root) as server:
        settings = {
            "vertexai": True,
            "project": "my-project",
            "location": "us-central1",
            "credentials": Credentials(token="ya29.test-token"),
            "base_url": server.url,
        }
        result = RLM(
            backend="gemini",
            backend_kwargs={"model_name": "gemini-2.5-pro", **settings},
            other_backends=["gemini"],
            other_backend_kwargs=[{"model_name": "gemini-2.5-flash", **settings}],
            environment="local",
        ).completion("The magic number is 4444.", "q")
    assert result.response == "4444", result.error
    assert server.counters.by_model == {"gemini-2.5-pro": 2, "gemini-2.5-flash": 1}
    paths = {h["path"].split(":")[0] for h in server.headers_log}
    assert "/v1beta1/projects/my-project/locations/us-central1/publishers/google/models/gemini-2.5-flash" in paths
    assert {h["authorization"] for h in server.headers_log} == {"Bearer ya29.test-token"}


@needs_boto3
@needs_litellm
def test_litellm_through_its_own_bedrock_route() -> None:
    root = ["```repl\nanswer = llm_query(context)\n```", "FINAL_VAR(answer)"]
    model = "bedrock/converse/us.anthropic.claude-haiku-4-5-20251001-v1:0"
    with FakeBedrockServer(root=root) as server:
        settings = {
            "aws_bedrock_runtime_endpoint": server.url,
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": "x",
            "aws_region_name": "us-east-1",
        }
        result = RLM(
            backend="litellm",
            backend_kwargs={"model_name": model, **settings},
            other_backends=["litellm"],
            other_backend_kwargs=[{"model_name": model, **settings}],
            environment="local",
        ).completion("The magic number is 3131.", "q")
    assert result.response == "3131", result.error
    assert server.counters.requests == 3
    assert all(h["authorization"].startswith("AWS4-HMAC-SHA256") for h in server.headers_log)
    usage = result.usage_summary
    assert usage.total.input_tokens == server.counters.prompt_tokens
    assert usage.total_cost > 0  # LiteLLM's own price for the Bedrock model


async def test_portkey_takes_the_references_api_key_as_the_portkey_key() -> None:
    with FakeOpenAIServer() as server:
        client = make_client(
            "portkey", {"model_name": "@openai/gpt-5-mini", "api_key": "portkey-key", "base_url": server.base_url}
        )
        reply = await client.acomplete([{"role": "user", "content": "magic number 2020"}])
        await client.aclose()
    assert reply.text == "2020"
    headers = server.headers_log[0]
    assert (headers["x-portkey-api-key"], headers["authorization"]) == ("portkey-key", "Bearer portkey-key")
    assert server.requests_log[0]["model"] == "@openai/gpt-5-mini"


@needs_boto3
async def test_a_bedrock_api_key_in_the_environment_selects_bearer_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore sends AWS_BEARER_TOKEN_BEDROCK as a bearer token, and only over HTTPS: against the plain-HTTP
    # local server it refuses before sending, which shows the token (not SigV4) was chosen.
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key")
    with FakeBedrockServer() as server:
        settings = {"model_name": "amazon.nova-lite-v1:0", "region": "us-west-2", "endpoint_url": server.url}
        client = make_client("bedrock", settings)
        with pytest.raises(ModelError, match="Bearer authorization requires an HTTPS endpoint"):
            await client.acomplete([{"role": "user", "content": "magic number 3030"}])
        await client.aclose()
    assert server.counters.requests == 0


@needs_boto3
def test_bedrock_refuses_an_api_key_argument_and_says_where_it_goes() -> None:
    with pytest.raises(ConfigurationError, match="AWS_BEARER_TOKEN_BEDROCK"):
        make_client("bedrock", {"model_name": "amazon.nova-lite-v1:0", "region_name": "us-east-1", "api_key": "k"})
