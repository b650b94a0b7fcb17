"""OpenAI's SDK as a model client; also every OpenAI-compatible server through `base_url`.

vLLM, Ollama, llama.cpp's server, OpenRouter and the test suite's fake server all speak this API.
Retries are the engine's (`core/lm/limiter.py`), so that an overloaded endpoint lowers the calls in flight
for every caller and no slot is held while waiting. The SDK's own retries are always off: given
`max_retries`, `_retry.call_with_retries` retries as asked (and the engine only retries overloads), so that
no wait passes the run's deadline. `timeout` bounds each whole request (the SDK's own timeout, which it is
also given, is per read); `max_reply_bytes` caps the reply while it is read (`_http.py`).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.lm._build_turns import BuildTurns, install_turn_hook
from rlm_adapters.core.lm._http import install_reply_cap
from rlm_adapters.core.lm._reply import cut_at_cap, field_of, openai_cache_reads, reading, reply_of, reply_text
from rlm_adapters.core.lm._retry import parse_retry_after
from rlm_adapters.core.lm._sdk_client import SHARED_KEYS, SDKClient
from rlm_adapters.core.lm._sdk_errors import out_of_requests, sdk_failure
from rlm_adapters.core.lm._sdk_setup import (
    import_sdk,
    preset_platform,
    shared_ssl_context,
    warm_up,
)
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.call_context import reply_cap
from rlm_adapters.core.lm.deadline import bounded
from rlm_adapters.core.lm.openai_stream import StreamedReply, read_stream, whole_body
from rlm_adapters.core.lm.reply_identity import request_identity
from rlm_adapters.errors import ConfigurationError, ModelError

if TYPE_CHECKING:
    import openai

# Keys of backend_kwargs that configure the SDK client; every other key goes to `chat.completions.create`.
CLIENT_KEYS = frozenset(
    {"api_key", "base_url", "organization", "project", "default_headers", "http_client", "stream", *SHARED_KEYS}
)


def openai_sdk() -> ModuleType:
    """The openai package, imported at the first client (checking a command line's credentials needs none),
    with the module of `chat.completions` that `request_keys` reads."""
    return import_sdk("openai", "openai.resources.chat.completions")


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a provider asked for: ``retry-after-ms``, else ``retry-after`` in seconds (or an HTTP date)."""
    return parse_retry_after(headers)


@functools.cache
def request_keys() -> frozenset[str]:
    """The keyword arguments `chat.completions.create` accepts (a typo fails at `RLM(...)`, not mid-run)."""
    from openai.resources.chat.completions import AsyncCompletions

    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self", "messages", "model", "stream"}


class OpenAIClient(SDKClient):
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
        self._openai = openai_sdk()  # the TLS context loads meanwhile and while RLM() and the run get ready
        super().__init__(model_name, kwargs, {*self.client_keys, *request_keys()})
        client_kwargs = {k: v for k, v in kwargs.items() if k in self.client_keys}
        self._request_kwargs = {k: v for k, v in kwargs.items() if k not in self.client_keys}
        extra_body = self._request_kwargs.get("extra_body")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ConfigurationError(
                f"backend {self.backend!r}: extra_body={str(extra_body)[:80]!r} must be a dict of the JSON fields "
                "to add to every request, e.g. extra_body={'top_k': 20}"
            )
        self._base_url = self._check_credentials(client_kwargs)
        stream = client_kwargs.pop("stream", True)
        if not isinstance(stream, bool):
            raise ConfigurationError(f"backend {self.backend!r}: stream={stream!r} must be True or False")
        self._stream = stream
        client_kwargs["max_retries"] = 0
        client_kwargs["timeout"] = self._policy.request_timeout  # per read, for the SDK; the whole request: ours
        self._client_kwargs = client_kwargs
        self._turns = BuildTurns()

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

    @classmethod
    def credentials_problem(cls, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        if settings.get("api_key") or settings.get("base_url") or environ.get("OPENAI_API_KEY"):
            return None
        return (
            "no OpenAI API key: set OPENAI_API_KEY, or point --base-url (or OPENAI_BASE_URL) at a local "
            "OpenAI-compatible server such as vLLM or Ollama"
        )

    def _make_sdk_client(self, kwargs: dict[str, Any]) -> openai.AsyncOpenAI:
        client: openai.AsyncOpenAI = self._openai.AsyncOpenAI(**kwargs)
        return client

    async def _prepare_sdk(self) -> None:
        await warm_up("openai", ("openai.resources.chat",))

    def _build_sdk_client(self) -> openai.AsyncOpenAI:
        kwargs = dict(self._client_kwargs)
        if "http_client" not in kwargs:
            # Clients are built per run (they bind to its event loop); the TLS context need not be.
            kwargs["http_client"] = self._openai.DefaultAsyncHttpxClient(verify=shared_ssl_context())
        install_reply_cap(kwargs["http_client"], self._max_reply_bytes)
        install_turn_hook(kwargs["http_client"])
        self._turns = BuildTurns()  # its lock binds to this run's event loop, as the client does
        client: openai.AsyncOpenAI = preset_platform(self._make_sdk_client(kwargs), "openai")
        return client

    @property
    def max_output_tokens(self) -> int | None:
        """The reply cap sent with every request (``max_completion_tokens`` / ``max_tokens``), if any.

        The budget holds this much output for each call in flight.
        """
        value = self._request_kwargs.get("max_completion_tokens", self._request_kwargs.get("max_tokens"))
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _cap_field(self) -> dict[str, int]:
        """The run's reply cap in this endpoint's field, unless backend_kwargs set one (sent as given).

        OpenAI's own API (and Azure's) take ``max_completion_tokens``, the only field its reasoning models
        accept; other OpenAI-compatible servers (vLLM, Ollama, llama.cpp, OpenRouter) all read ``max_tokens``.
        """
        cap = reply_cap()
        if cap is None or any(k in self._request_kwargs for k in ("max_completion_tokens", "max_tokens")):
            return {}
        official = self._base_url is None or "openai.com" in self._base_url or "openai.azure.com" in self._base_url
        return {"max_completion_tokens" if official else "max_tokens": cap}

    @property
    def endpoint(self) -> str:
        """Where calls go: the concurrency limit is learnt per endpoint, shared by its models."""
        return self._base_url or "https://api.openai.com/v1"

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: backend, endpoint, model, request settings (no secrets)."""
        # The client's own settings too: default_headers (a gateway's routing), Azure's api_version.
        return request_identity(
            self.backend, self.endpoint, self._model_name, {**self._client_kwargs, **self._request_kwargs}
        )

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One chat completion."""
        client: openai.AsyncOpenAI = await self._sdk()
        settings: dict[str, Any] = {**self._cap_field(), **self._request_kwargs}

        if self._stream:
            settings.update(stream=True, stream_options={"include_usage": True})
        # The messages go in `extra_body`, which the SDK sends as it is given. Its body transform (aliases and
        # formats, none of which a role-and-text message has: tests/core/lm/test_openai_wire.py holds it to
        # that) walks each message through the six message types, 0.16 ms a message on the event loop, which a
        # batch's requests wait for in turn (issue 53). A backend_kwargs extra_body is sent over it, as before.
        extra_body = {"messages": messages, **(settings.pop("extra_body", None) or {})}
        turns = self._turns

        async def attempt() -> tuple[Any, Any]:
            async with turns.turn():  # built one at a time, each sent before the next is built (_build_turns)
                raw = await client.chat.completions.with_raw_response.create(
                    model=self._model_name,
                    messages=[],
                    extra_body=extra_body,
                    timeout=max(0.001, bounded(self._policy.request_timeout)),
                    **settings,
                )
            if not self._stream:
                return raw, raw.parse()
            if not str(raw.headers.get("content-type", "")).startswith("text/event-stream"):
                # A server that ignored `stream` (or an error page with status 200): read it as a whole reply.
                return raw, whole_body(await raw.http_response.aread())
            return raw, await read_stream(raw.parse())

        raw, response = await self._send(
            attempt,
            lambda exc: sdk_failure(exc, self._openai),
            where=self._base_url,
            secrets=(client.api_key or "",),  # an upstream may echo the key it was sent
        )
        source = f"{self.provider} call to model {self._model_name!r}"
        with reading(source, self._model_name):
            return self._parse(response, messages, source, out_of_requests(raw.headers))

    def _parse(self, response: Any, messages: list[Message], source: str, near_rate_limit: bool) -> LMResponse:
        if isinstance(response, StreamedReply):
            response = response.completion(source, self._model_name)
        if isinstance(response, str) or not (isinstance(response, Mapping) or hasattr(response, "choices")):
            # Some OpenAI-compatible servers answer errors with an HTML page and status 200.
            raise ModelError(
                f"{source} returned a body that is not a chat completion: {str(response)[:200]!r}",
                model=self._model_name,
            )
        choices = field_of(response, "choices")
        if not isinstance(choices, list) or not choices:
            raise ModelError(f"{source} returned no choices: {str(choices)[:200]!r}", model=self._model_name)
        message = field_of(choices[0], "message")
        content = field_of(message, "content")
        refusal = field_of(message, "refusal")
        if content is None and isinstance(refusal, str):
            content = refusal  # the model declined, in words: that is its reply
        text = reply_text(content, source=source, model=self._model_name)
        usage = field_of(response, "usage")
        return reply_of(
            text,
            model=self._model_name,
            messages=messages,
            input_tokens=field_of(usage, "prompt_tokens"),
            output_tokens=field_of(usage, "completion_tokens"),
            near_rate_limit=near_rate_limit,
            cache_read_tokens=openai_cache_reads(usage),
            truncated=cut_at_cap(field_of(choices[0], "finish_reason")),
        )
