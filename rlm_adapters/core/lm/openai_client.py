"""OpenAI's SDK as a model client; also every OpenAI-compatible server through `base_url`.

vLLM, Ollama, llama.cpp's server, OpenRouter and the test suite's fake server all speak this API.
Timeouts are the SDK's own (`timeout`). Retries are the engine's (`core/lm/limiter.py`), so that an
overloaded endpoint lowers the calls in flight for every caller and no slot is held while waiting; the
SDK's own retries are off unless `max_retries` is given (then the SDK retries as asked, and the engine
only retries overloads, which lower the limit).
"""

from __future__ import annotations

import email.utils
import functools
import inspect
import os
import ssl
import time
from collections.abc import Mapping
from typing import Any

import openai

from rlm_adapters.core.lm._common import check_keys, openai_cache_reads
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.errors import ConfigurationError, ModelError

# 408 timeout, 409 conflict (the SDK retries it too), 5xx server errors; 429 is an overload (limiter.py).
RETRYABLE_STATUSES = frozenset({408, 409, 500, 502, 503, 504})

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
            429: "rate limited after the retries; lower max_concurrency or retry later",
        }.get(status, "the provider failed after the retries")
        return f"{provider} call to model {model!r}{where} failed with HTTP {status}: {detail} ({hint})"
    kind = type(exc).__name__
    return f"{provider} call to model {model!r}{where} failed ({kind}): {detail}"


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a provider asked for: ``retry-after-ms``, else ``retry-after`` in seconds (or an HTTP date)."""
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def out_of_requests(headers: Mapping[str, str]) -> bool:
    """Whether the rate-limit headers say no request is left in the current window."""
    return headers.get("x-ratelimit-remaining-requests", "").strip() == "0"


@functools.cache
def request_keys() -> frozenset[str]:
    """The keyword arguments `chat.completions.create` accepts (a typo fails at `RLM(...)`, not mid-run)."""
    from openai.resources.chat.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self", "messages", "model", "stream"}


class OpenAIClient:
    """An `LMClient` over `openai.AsyncOpenAI`.

    Args:
        model_name: The model to call, e.g. ``"gpt-5-mini"``.
        **kwargs: ``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``http_client`` and the other
            `AsyncOpenAI` options configure the client; the keyword arguments of
            ``chat.completions.create`` (``temperature``, ``reasoning_effort``, ``max_completion_tokens``,
            ``extra_headers``, ``extra_body``, ...) are sent with every request. Any other key is refused.
    """

    provider = "OpenAI"
    backend = "openai"
    client_keys: frozenset[str] = CLIENT_KEYS

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        if not model_name or not isinstance(model_name, str):
            raise ConfigurationError(
                f"the {self.backend} backend needs backend_kwargs['model_name'], got {model_name!r}"
            )
        check_keys(self.backend, kwargs, {*self.client_keys, *request_keys()})
        client_kwargs = {k: v for k, v in kwargs.items() if k in self.client_keys}
        self._request_kwargs = {k: v for k, v in kwargs.items() if k not in self.client_keys}
        base_url = self._check_credentials(client_kwargs)
        # Given max_retries, the SDK retries as asked and the engine retries only overloads (429/503).
        self._engine_retries = "max_retries" not in client_kwargs
        client_kwargs.setdefault("max_retries", 0)
        self._model_name = model_name
        self._base_url = base_url
        self._client_kwargs = client_kwargs
        self._sdk_client: openai.AsyncOpenAI | None = None

    def _check_credentials(self, client_kwargs: dict[str, Any]) -> str | None:
        """Refuse a client with no key (local servers need none); return the base URL for messages."""
        base_url: str | None = client_kwargs.get("base_url") or os.environ.get("OPENAI_BASE_URL")
        if not client_kwargs.get("api_key") and not os.environ.get("OPENAI_API_KEY"):
            if not base_url:
                raise ConfigurationError(
                    "no OpenAI API key: set OPENAI_API_KEY, or pass backend_kwargs={'api_key': ...}, "
                    "or a base_url for a local OpenAI-compatible server"
                )
            client_kwargs["api_key"] = "not-needed"  # local servers ignore the key but the SDK wants one
        return base_url

    def _make_sdk_client(self, kwargs: dict[str, Any]) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(**kwargs)

    @property
    def _client(self) -> openai.AsyncOpenAI:
        # Built on first use, inside the run's event loop: validating settings in RLM() builds no SDK client.
        if self._sdk_client is None:
            kwargs = dict(self._client_kwargs)
            if "http_client" not in kwargs:
                # Clients are built per run (they bind to its event loop); the TLS context need not be.
                kwargs["http_client"] = openai.DefaultAsyncHttpxClient(verify=shared_ssl_context())
            self._sdk_client = self._make_sdk_client(kwargs)
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

    @property
    def endpoint(self) -> str:
        """Where calls go: the concurrency limit is learnt per endpoint, shared by its models."""
        return self._base_url or "https://api.openai.com/v1"

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One chat completion."""
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                model=self._model_name,
                messages=messages,  # type: ignore[arg-type]
                **self._request_kwargs,
            )
            response = raw.parse()
        except (openai.OpenAIError, ValueError) as exc:  # ValueError: a body that is not JSON
            status = getattr(exc, "status_code", None)
            headers = exc.response.headers if isinstance(exc, openai.APIStatusError) else {}
            raise ModelError(
                describe_sdk_error(exc, self.provider, self._model_name, self._base_url),
                model=self._model_name,
                status_code=status,
                retry_after=retry_after_seconds(headers),
                retryable=self._engine_retries
                and (isinstance(exc, openai.APIConnectionError) or status in RETRYABLE_STATUSES),
                rate_limited=out_of_requests(headers),
            ) from exc
        if isinstance(response, str) or not hasattr(response, "choices"):
            # Some OpenAI-compatible servers answer errors with an HTML page and status 200.
            raise ModelError(
                f"{self.provider} call to model {self._model_name!r} returned a body that is not a chat completion: "
                f"{str(response)[:200]!r}",
                model=self._model_name,
            )
        if not response.choices:
            raise ModelError(
                f"{self.provider} call to model {self._model_name!r} returned no choices", model=self._model_name
            )
        text = response.choices[0].message.content or ""
        usage = response.usage
        input_tokens = usage.prompt_tokens if usage else sum(estimate_tokens(m["content"]) for m in messages)
        output_tokens = usage.completion_tokens if usage else estimate_tokens(text)
        return LMResponse(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=self._model_name,
            near_rate_limit=out_of_requests(raw.headers),
            cache_read_tokens=openai_cache_reads(usage) if usage else 0,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connection pool (if one was opened)."""
        if self._sdk_client is not None:
            await self._sdk_client.close()
            self._sdk_client = None
