"""Anthropic's SDK as a model client."""

from __future__ import annotations

import inspect
import os
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._common import check_keys
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.identity import request_identity
from rlm_adapters.core.lm.openai_client import describe_sdk_error
from rlm_adapters.errors import ConfigurationError, ModelError

CLIENT_KEYS = frozenset({"api_key", "base_url", "timeout", "max_retries", "default_headers", "http_client"})
DEFAULT_MAX_TOKENS = 8192


class AnthropicClient:
    """An `LMClient` over `anthropic.AsyncAnthropic`.

    System messages are sent as Anthropic's top-level ``system`` parameter.

    Args:
        model_name: The model to call, e.g. ``"claude-sonnet-4-5"``.
        **kwargs: ``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``http_client`` configure the
            client; ``max_tokens`` (default 8192) and the other keywords of ``messages.create`` go with every
            request. Any other key is refused.
    """

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        anthropic = require("anthropic", extra="anthropic", feature="the anthropic backend")
        if not model_name or not isinstance(model_name, str):
            raise ConfigurationError(f"the anthropic backend needs backend_kwargs['model_name'], got {model_name!r}")
        # What messages.create accepts: a misspelt key fails at RLM(...), not as a TypeError mid-run.
        create = inspect.signature(anthropic.resources.messages.AsyncMessages.create).parameters
        check_keys("anthropic", kwargs, {*CLIENT_KEYS, *create} - {"self", "messages", "model", "stream", "system"})
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

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: backend, endpoint, model, request settings (no secrets)."""
        endpoint = self._base_url or "https://api.anthropic.com"
        return request_identity("anthropic", endpoint, self._model_name, self._request_kwargs)

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One Messages API call."""
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        turns = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
        extra: dict[str, Any] = {"system": system} if system else {}
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
        return LMResponse(
            text=text,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            model=self._model_name,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()
