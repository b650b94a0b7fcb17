"""The OpenAI and Anthropic clients at the HTTP level, through the real SDKs.

Current SDK releases send through httpx2, which respx does not patch, so the transport is injected
through the SDK's own `http_client=` seam, as the SDKs document for custom transports.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import pytest

from rlm_adapters.core.lm.anthropic_client import AnthropicClient
from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.errors import ModelError

Handler = Callable[[httpx2.Request], httpx2.Response]


def openai_reply(text: str, prompt_tokens: int = 11, completion_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-5-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def anthropic_reply(text: str) -> dict[str, Any]:
    return {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 21, "output_tokens": 5},
    }


def sequence(*responses: httpx2.Response) -> tuple[Handler, list[httpx2.Request]]:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return responses[min(len(seen) - 1, len(responses) - 1)]

    return handler, seen


def openai_client(handler: Handler, **kwargs: Any) -> OpenAIClient:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return OpenAIClient(
        "gpt-5-mini", api_key="sk-test", base_url="https://api.example.test/v1", http_client=http, **kwargs
    )


def anthropic_client(handler: Handler, **kwargs: Any) -> AnthropicClient:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    return AnthropicClient("claude-haiku-4-5", api_key="sk-ant-test", http_client=http, **kwargs)


async def test_openai_success_reports_text_and_usage_and_sends_extra_options() -> None:
    handler, seen = sequence(httpx2.Response(200, json=openai_reply("hello")))
    client = openai_client(handler, max_retries=0, temperature=0.2)
    response = await client.acomplete([{"role": "user", "content": "hi"}])
    assert (response.text, response.input_tokens, response.output_tokens) == ("hello", 11, 3)
    body = json.loads(seen[0].content)
    assert body["model"] == "gpt-5-mini" and body["temperature"] == 0.2
    assert seen[0].headers["authorization"] == "Bearer sk-test"
    await client.aclose()


async def test_openai_429_is_retried_by_the_sdk_then_succeeds() -> None:
    limited = httpx2.Response(429, json={"error": {"message": "slow down"}}, headers={"retry-after": "0"})
    handler, seen = sequence(limited, httpx2.Response(200, json=openai_reply("after retry")))
    client = openai_client(handler, max_retries=2)
    assert (await client.acomplete([{"role": "user", "content": "hi"}])).text == "after retry"
    assert len(seen) == 2


async def test_openai_500_becomes_a_model_error_naming_model_and_status() -> None:
    handler, _ = sequence(httpx2.Response(500, json={"error": {"message": "upstream exploded"}}))
    client = openai_client(handler, max_retries=0)
    with pytest.raises(
        ModelError, match=r"model 'gpt-5-mini' at https://api.example.test/v1 failed with HTTP 500"
    ) as info:
        await client.acomplete([{"role": "user", "content": "hi"}])
    assert info.value.status_code == 500


async def test_openai_timeout_becomes_a_model_error() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ReadTimeout("timed out", request=request)

    client = openai_client(handler, max_retries=0, timeout=0.5)
    with pytest.raises(ModelError, match=r"APITimeoutError"):
        await client.acomplete([{"role": "user", "content": "hi"}])


async def test_openai_garbage_body_is_a_clear_error() -> None:
    handler, _ = sequence(httpx2.Response(200, content=b"<html>not json</html>", headers={"content-type": "text/html"}))
    client = openai_client(handler, max_retries=0)
    with pytest.raises(ModelError, match=r"model 'gpt-5-mini' .*not a chat completion"):
        await client.acomplete([{"role": "user", "content": "hi"}])


async def test_anthropic_sends_system_separately_and_reports_usage() -> None:
    handler, seen = sequence(httpx2.Response(200, json=anthropic_reply("bonjour")))
    client = anthropic_client(handler, max_retries=0, prompt_caching=False)
    response = await client.acomplete([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    assert (response.text, response.input_tokens, response.output_tokens) == ("bonjour", 21, 5)
    body = json.loads(seen[0].content)
    assert body["system"] == "be brief" and body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 8192
    headers = seen[0].headers
    assert headers.get("x-api-key") == "sk-ant-test" or headers.get("authorization") == "Bearer sk-ant-test"


async def test_anthropic_429_then_success_and_500_error() -> None:
    limited = httpx2.Response(
        429,
        json={"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}},
        headers={"retry-after": "0"},
    )
    handler, seen = sequence(limited, httpx2.Response(200, json=anthropic_reply("ok")))
    assert (await anthropic_client(handler, max_retries=1).acomplete([{"role": "user", "content": "x"}])).text == "ok"
    assert len(seen) == 2
    handler, _ = sequence(
        httpx2.Response(500, json={"type": "error", "error": {"type": "api_error", "message": "boom"}})
    )
    with pytest.raises(ModelError, match=r"claude-haiku-4-5.*HTTP 500"):
        await anthropic_client(handler, max_retries=0).acomplete([{"role": "user", "content": "x"}])


async def test_anthropic_timeout_becomes_a_model_error() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectTimeout("timed out", request=request)

    with pytest.raises(ModelError, match="APITimeoutError"):
        await anthropic_client(handler, max_retries=0).acomplete([{"role": "user", "content": "x"}])


def test_anthropic_without_key_names_the_variable() -> None:
    from rlm_adapters.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicClient("claude-haiku-4-5")
