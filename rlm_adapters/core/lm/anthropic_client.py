"""Anthropic's SDK as a model client."""

from __future__ import annotations

import inspect
import os
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._caching import EPHEMERAL, breakpoints
from rlm_adapters.core.lm._common import check_keys
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.openai_client import describe_sdk_error
from rlm_adapters.errors import ConfigurationError, ModelError

CLIENT_KEYS = frozenset({"api_key", "base_url", "timeout", "max_retries", "default_headers", "http_client"})
DEFAULT_MAX_TOKENS = 8192


def cached_request(messages: list[Message], caching: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``system`` argument (as keywords) and the turns of a Messages API request, with prompt-cache
    breakpoints (`_caching.breakpoints`) on the system prompt and the stable prefix of the history."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    turns: list[dict[str, Any]] = [
        {"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"
    ]
    if not caching:
        return ({"system": system} if system else {}), turns
    for index in breakpoints(len(turns), bool(system)):
        text = turns[index]["content"]
        if text:  # an empty text block cannot carry a breakpoint
            turns[index]["content"] = [{"type": "text", "text": text, "cache_control": dict(EPHEMERAL)}]
    if not system:
        return {}, turns
    return {"system": [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]}, turns


class AnthropicClient:
    """An `LMClient` over `anthropic.AsyncAnthropic`.

    System messages are sent as Anthropic's top-level ``system`` parameter. Conversations (a system prompt,
    or more than one turn) carry prompt-cache breakpoints on the system prompt and the stable prefix of the
    history, so that each root turn re-reads the earlier ones from Anthropic's cache (`_caching`); the
    usage's cache reads and writes are reported apart (`LMResponse.cache_read_tokens`).

    Args:
        model_name: The model to call, e.g. ``"claude-sonnet-4-5"``.
        **kwargs: ``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``http_client`` configure the
            client; ``prompt_caching=False`` sends no breakpoints; ``max_tokens`` (default 8192) and the other
            keywords of ``messages.create`` go with every request. Any other key is refused.
    """

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        anthropic = require("anthropic", extra="anthropic", feature="the anthropic backend")
        if not model_name or not isinstance(model_name, str):
            raise ConfigurationError(f"the anthropic backend needs backend_kwargs['model_name'], got {model_name!r}")
        # What messages.create accepts: a misspelt key fails at RLM(...), not as a TypeError mid-run.
        create = inspect.signature(anthropic.resources.messages.AsyncMessages.create).parameters
        check_keys(
            "anthropic",
            kwargs,
            {*CLIENT_KEYS, "prompt_caching", *create} - {"self", "messages", "model", "stream", "system"},
        )
        caching = kwargs.pop("prompt_caching", True)
        if not isinstance(caching, bool):
            raise ConfigurationError(f"backend 'anthropic': prompt_caching={caching!r} must be True or False")
        self._caching = caching
        client_kwargs = {k: v for k, v in kwargs.items() if k in CLIENT_KEYS}
        self._request_kwargs = {k: v for k, v in kwargs.items() if k not in CLIENT_KEYS}
        self._request_kwargs.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        if not client_kwargs.get("api_key") and not os.environ.get("ANTHROPIC_API_KEY"):
            raise ConfigurationError(
                "no Anthropic API key: set ANTHROPIC_API_KEY or pass backend_kwargs={'api_key': ...}"
            )
        self._sdk = anthropic
        self._model_name = model_name
        self._base_url = client_kwargs.get("base_url")
        self._client = anthropic.AsyncAnthropic(**client_kwargs)

    @property
    def model_name(self) -> str:
        """The model this client calls."""
        return self._model_name

    @property
    def max_output_tokens(self) -> int | None:
        """The ``max_tokens`` sent with every request (the budget holds this much output per call)."""
        value = self._request_kwargs.get("max_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One Messages API call."""
        extra, turns = cached_request(messages, self._caching)
        try:
            response = await self._client.messages.create(
                model=self._model_name, messages=turns, **extra, **self._request_kwargs
            )
        except (self._sdk.AnthropicError, ValueError) as exc:  # ValueError: a body that is not JSON
            raise ModelError(
                describe_sdk_error(exc, "Anthropic", self._model_name, self._base_url),
                model=self._model_name,
                status_code=getattr(exc, "status_code", None),
            ) from exc
        text = "".join(getattr(block, "text", "") for block in response.content)
        usage = response.usage
        # Anthropic's input_tokens are those after the last breakpoint; the cache's reads and writes come apart.
        read = usage.cache_read_input_tokens or 0
        write = usage.cache_creation_input_tokens or 0
        return LMResponse(
            text=text,
            input_tokens=usage.input_tokens + read + write,
            output_tokens=usage.output_tokens,
            model=self._model_name,
            cache_read_tokens=read,
            cache_write_tokens=write,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()
