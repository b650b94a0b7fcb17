"""OpenAI's SDK as a model client; also every OpenAI-compatible server through `base_url`.

vLLM, Ollama, llama.cpp's server, OpenRouter and the test suite's fake server all speak this API.
Retries (429 and 5xx with backoff) and timeouts are the SDK's own (`max_retries`, `timeout`).
"""

from __future__ import annotations

import functools
import os
import ssl
from typing import Any

import openai

from rlm_adapters.core.budget import estimate_tokens
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.errors import ConfigurationError, ModelError

# Keys of backend_kwargs that configure the SDK client; every other key goes to `chat.completions.create`.
CLIENT_KEYS = frozenset(
    {
        "api_key",
        "base_url",
        "timeout",
        "max_retries",
        "organization",
        "project",
        "default_headers",
        "http_client",
    }
)


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context per process: loading the CA bundle costs 50-250 ms, which the SDK pays per client."""
    try:  # the HTTP library of this SDK version: httpx2 (openai >= 3), else httpx
        import httpx2 as http
    except ImportError:
        import httpx as http  # type: ignore[no-redef]
    return http.create_ssl_context()


def describe_sdk_error(exc: Exception, provider: str, model: str, base_url: str | None) -> str:
    """One line saying which call failed, how, and what to check."""
    where = f" at {base_url}" if base_url else ""
    status = getattr(exc, "status_code", None)
    detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if status is not None:
        hint = {
            401: "check the API key",
            403: "check the key's permissions",
            404: "check the model name and base_url",
            429: "rate limited after the SDK's retries; lower max_concurrency or retry later",
        }.get(status, "the provider failed after the SDK's retries")
        return f"{provider} call to model {model!r}{where} failed with HTTP {status}: {detail} ({hint})"
    kind = type(exc).__name__
    return f"{provider} call to model {model!r}{where} failed ({kind}): {detail}"


class OpenAIClient:
    """An `LMClient` over `openai.AsyncOpenAI`.

    Args:
        model_name: The model to call, e.g. ``"gpt-5-mini"``.
        **kwargs: ``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``http_client`` and the other
            `AsyncOpenAI` options configure the client; any other key (``temperature``,
            ``reasoning_effort``, ``max_completion_tokens``, ...) is sent with every request.
    """

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        if not model_name or not isinstance(model_name, str):
            raise ConfigurationError(f"the openai backend needs backend_kwargs['model_name'], got {model_name!r}")
        client_kwargs = {k: v for k, v in kwargs.items() if k in CLIENT_KEYS}
        self._request_kwargs = {k: v for k, v in kwargs.items() if k not in CLIENT_KEYS}
        base_url = client_kwargs.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        if not client_kwargs.get("api_key") and not os.environ.get("OPENAI_API_KEY"):
            if not base_url:
                raise ConfigurationError(
                    "no OpenAI API key: set OPENAI_API_KEY, or pass backend_kwargs={'api_key': ...}, "
                    "or a base_url for a local OpenAI-compatible server"
                )
            client_kwargs["api_key"] = "not-needed"  # local servers ignore the key but the SDK wants one
        self._model_name = model_name
        self._base_url = base_url
        self._client_kwargs = client_kwargs
        self._sdk_client: openai.AsyncOpenAI | None = None

    @property
    def _client(self) -> openai.AsyncOpenAI:
        # Built on first use, inside the run's event loop: validating settings in RLM() builds no SDK client.
        if self._sdk_client is None:
            kwargs = dict(self._client_kwargs)
            if "http_client" not in kwargs:
                # Clients are built per run (they bind to its event loop); the TLS context need not be.
                kwargs["http_client"] = openai.DefaultAsyncHttpxClient(verify=shared_ssl_context())
            self._sdk_client = openai.AsyncOpenAI(**kwargs)
        return self._sdk_client

    @property
    def model_name(self) -> str:
        """The model this client calls."""
        return self._model_name

    @property
    def max_output_tokens(self) -> int | None:
        """The reply cap sent with every request (``max_completion_tokens`` / ``max_tokens``), if any.

        The budget holds this much output for each call in flight.
        """
        value = self._request_kwargs.get("max_completion_tokens", self._request_kwargs.get("max_tokens"))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One chat completion."""
        try:
            response = await self._client.chat.completions.create(
                model=self._model_name,
                messages=messages,  # type: ignore[arg-type]
                **self._request_kwargs,
            )
        except (openai.OpenAIError, ValueError) as exc:  # ValueError: a body that is not JSON
            raise ModelError(
                describe_sdk_error(exc, "OpenAI", self._model_name, self._base_url),
                model=self._model_name,
                status_code=getattr(exc, "status_code", None),
            ) from exc
        if isinstance(response, str) or not hasattr(response, "choices"):
            # Some OpenAI-compatible servers answer errors with an HTML page and status 200.
            raise ModelError(
                f"OpenAI call to model {self._model_name!r} returned a body that is not a chat completion: "
                f"{str(response)[:200]!r}",
                model=self._model_name,
            )
        if not response.choices:
            raise ModelError(f"OpenAI call to model {self._model_name!r} returned no choices", model=self._model_name)
        text = response.choices[0].message.content or ""
        usage = response.usage
        input_tokens = usage.prompt_tokens if usage else sum(estimate_tokens(m["content"]) for m in messages)
        output_tokens = usage.completion_tokens if usage else estimate_tokens(text)
        return LMResponse(text=text, input_tokens=input_tokens, output_tokens=output_tokens, model=self._model_name)

    async def aclose(self) -> None:
        """Close the SDK client's connection pool (if one was opened)."""
        if self._sdk_client is not None:
            await self._sdk_client.close()
            self._sdk_client = None
