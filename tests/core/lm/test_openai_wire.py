"""The OpenAI client's request body, byte for byte what the SDK's own ``chat.completions.create`` would send.

The client hands the messages to the SDK in ``extra_body``, which the SDK sends as given, so that the SDK's body
transform does not walk every message of every request (issue 53). That is only right while the transform
leaves such messages as they are: these tests hold it to that for each SDK release CI installs, and compare
the body with the one the SDK builds itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import httpx2
import openai
import pytest
from openai._utils import maybe_transform
from openai.types.chat import ChatCompletionMessageParam, completion_create_params

from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.errors import ConfigurationError
from tests.core.lm.test_sdk_clients import openai_client, openai_reply, sequence

# The engine's messages: a role and a text (`base.Message`), of every role, with text a transform could touch.
MESSAGES: list[Message] = [
    {"role": "system", "content": "You are the root of an RLM. 2026-12-04T05:00:00Z"},
    {"role": "user", "content": "context_0 holds 3 documents; base64: aGVsbG8=. What is the magic number?"},
    {"role": "assistant", "content": "```repl\nprint(context_0[:100])\n```"},
    {"role": "user", "content": "Output: é ☃ \u0000 ... (10,000 characters)"},
]


def test_the_sdks_transform_leaves_role_and_text_messages_as_they_are() -> None:
    assert maybe_transform(MESSAGES, Iterable[ChatCompletionMessageParam]) == MESSAGES
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    assert maybe_transform(body, completion_create_params.CompletionCreateParamsStreaming) == body


def _bodies(**backend_kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON body our client sends for `MESSAGES`, and the one the SDK sends for the same call."""
    handler, seen = sequence(httpx2.Response(200, json=openai_reply("ok")))
    client = openai_client(handler, stream=False, **backend_kwargs)
    asyncio.run(client.acomplete(MESSAGES))
    settings = {k: v for k, v in backend_kwargs.items() if k not in {"timeout", "max_retries"}}
    sdk = openai.AsyncOpenAI(api_key="k", http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    asyncio.run(sdk.chat.completions.create(model="gpt-5-mini", messages=MESSAGES, **settings))
    ours, theirs = (json.loads(request.content) for request in seen)
    return ours, theirs


def test_the_body_is_the_one_the_sdk_builds_itself() -> None:
    ours, theirs = _bodies(temperature=0.2, max_completion_tokens=50)
    assert ours == theirs
    assert ours["messages"] == MESSAGES and ours["temperature"] == 0.2


def test_an_extra_body_from_backend_kwargs_is_still_sent_over_the_body() -> None:
    ours, theirs = _bodies(extra_body={"top_k": 5, "provider": {"order": ["a", "b"]}})
    assert ours == theirs
    assert ours["top_k"] == 5 and ours["provider"] == {"order": ["a", "b"]} and ours["messages"] == MESSAGES


def test_an_extra_body_that_is_not_a_dict_is_refused_at_construction_naming_it() -> None:
    with pytest.raises(
        ConfigurationError, match=r"backend 'openai': extra_body=.*top_k.* must be a dict of the JSON fields"
    ):
        OpenAIClient("m", api_key="k", extra_body=["top_k"])
