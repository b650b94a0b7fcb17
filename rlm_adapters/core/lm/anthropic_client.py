"""Anthropic's SDK as a model client.

As for the OpenAI client: the SDK's retries are off (`_retry.call_with_retries` retries when `max_retries` is
given, else the engine does), `timeout` bounds each whole request, `max_reply_bytes` caps the reply while it is
read (`_http.py`), and the reply's blocks are read defensively (`_reply.py`: text blocks joined, thinking
skipped, anything else refused by name).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

from rlm_adapters.core.lm._build_turns import BuildTurns, install_turn_hook
from rlm_adapters.core.lm._caching import EPHEMERAL, breakpoints
from rlm_adapters.core.lm._http import install_reply_cap
from rlm_adapters.core.lm._reply import (
    cut_at_cap,
    field_of,
    reading,
    reply_of,
    reply_text,
    usage_field,
    with_cache_tokens,
)
from rlm_adapters.core.lm._sdk_client import SHARED_KEYS, SDKClient
from rlm_adapters.core.lm._sdk_errors import out_of_requests, sdk_failure
from rlm_adapters.core.lm._sdk_setup import (
    import_sdk,
    preset_platform,
    shared_ssl_context,
    warm_up,
)
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.call_context import capped
from rlm_adapters.core.lm.deadline import bounded
from rlm_adapters.core.lm.reply_identity import request_identity
from rlm_adapters.errors import ConfigurationError, ModelError

CLIENT_KEYS = frozenset({"api_key", "base_url", "default_headers", "http_client", *SHARED_KEYS})
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


class AnthropicClient(SDKClient):
    """An `LMClient` over `anthropic.AsyncAnthropic`.

    System messages are sent as Anthropic's top-level ``system`` parameter. Conversations (a system prompt,
    or more than one turn) carry prompt-cache breakpoints on the system prompt and the stable prefix of the
    history, so that each root turn re-reads the earlier ones from Anthropic's cache (`_caching`); the
    usage's cache reads and writes are reported apart (`LMResponse.cache_read_tokens`).

    Args:
        model_name: The model to call, e.g. ``"claude-sonnet-4-5"``.
        **kwargs: ``api_key``, ``base_url``, ``timeout``, ``max_retries``, ``http_client`` configure the
            client; ``prompt_caching=False`` sends no breakpoints; ``max_tokens`` (default: the run's
            ``max_reply_tokens``, else 8192, since Anthropic requires one) and the other keywords of
            ``messages.create`` go with every request. Any other key is refused.
    """

    backend = "anthropic"
    provider = "Anthropic"

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        # The TLS context loads meanwhile and while RLM() and the run get ready (issue 53).
        anthropic = import_sdk("anthropic", "anthropic.resources.messages", extra="anthropic")
        # What messages.create accepts: a misspelt key fails at RLM(...), not as a TypeError mid-run.
        create = inspect.signature(anthropic.resources.messages.AsyncMessages.create).parameters
        known = {*CLIENT_KEYS, "prompt_caching", *create} - {"self", "messages", "model", "stream", "system"}
        super().__init__(model_name, kwargs, known)
        caching = kwargs.pop("prompt_caching", True)
        if not isinstance(caching, bool):
            raise ConfigurationError(f"backend 'anthropic': prompt_caching={caching!r} must be True or False")
        self._caching = caching
        client_kwargs = {k: v for k, v in kwargs.items() if k in CLIENT_KEYS}
        self._request_kwargs = {k: v for k, v in kwargs.items() if k not in CLIENT_KEYS}
        if not client_kwargs.get("api_key") and not os.environ.get("ANTHROPIC_API_KEY"):
            raise ConfigurationError(
                "no Anthropic API key: set ANTHROPIC_API_KEY or pass backend_kwargs={'api_key': ...}"
            )
        self._sdk_module = anthropic
        self._base_url = client_kwargs.get("base_url")
        client_kwargs["max_retries"] = 0
        client_kwargs["timeout"] = self._policy.request_timeout  # per read, for the SDK; the whole request: ours
        self._client_kwargs = client_kwargs
        self._build_turns = BuildTurns()

    @classmethod
    def credentials_problem(cls, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        if settings.get("api_key") or environ.get("ANTHROPIC_API_KEY"):
            return None
        return "no Anthropic API key: set ANTHROPIC_API_KEY"

    async def _prepare_sdk(self) -> None:
        await warm_up("anthropic", ("anthropic.resources.messages",))

    def _build_sdk_client(self) -> Any:
        kwargs = dict(self._client_kwargs)
        if "http_client" not in kwargs:
            # Clients are built per run; the TLS context (40-250 ms to load) need not be.
            kwargs["http_client"] = self._sdk_module.DefaultAsyncHttpxClient(verify=shared_ssl_context())
        install_reply_cap(kwargs["http_client"], self._max_reply_bytes)
        install_turn_hook(kwargs["http_client"])
        self._build_turns = BuildTurns()  # its lock binds to this run's event loop, as the client does
        return preset_platform(self._sdk_module.AsyncAnthropic(**kwargs), "anthropic")

    @property
    def endpoint(self) -> str:
        """Where calls go (the engine learns a concurrency limit per endpoint)."""
        return str(self._base_url or "https://api.anthropic.com")

    @property
    def max_output_tokens(self) -> int | None:
        """The ``max_tokens`` backend_kwargs set for every request, if any (the budget holds this much output per
        call); without one, the run's ``max_reply_tokens`` is sent."""
        value = self._request_kwargs.get("max_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: backend, endpoint, model, request settings (no secrets)."""
        endpoint = self._base_url or "https://api.anthropic.com"
        settings = {**self._client_kwargs, **self._request_kwargs}  # default_headers (a beta) decide too
        return request_identity("anthropic", endpoint, self._model_name, settings)

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One Messages API call."""
        extra, turns = cached_request(messages, self._caching)
        client = await self._sdk()
        settings = {**self._request_kwargs, "max_tokens": capped(self.max_output_tokens) or DEFAULT_MAX_TOKENS}

        build_turns = self._build_turns

        async def attempt() -> tuple[Any, Any]:
            async with build_turns.turn():  # built one at a time, each sent before the next is built
                raw = await client.messages.with_raw_response.create(
                    model=self._model_name,
                    messages=turns,
                    timeout=max(0.001, bounded(self._policy.request_timeout)),
                    **extra,
                    **settings,
                )
            parsed = raw.parse()  # a coroutine in this SDK's async raw responses
            return raw, await parsed if inspect.isawaitable(parsed) else parsed

        raw, response = await self._send(
            attempt,
            lambda exc: sdk_failure(exc, self._sdk_module),
            where=self._base_url,
            secrets=(client.api_key or "",),  # an upstream may echo the key it was sent
        )
        source = f"Anthropic call to model {self._model_name!r}"
        with reading(source, self._model_name):
            if isinstance(response, str) or not hasattr(response, "content"):
                raise ModelError(
                    f"{source} returned a body that is not a message: {str(response)[:200]!r}", model=self._model_name
                )
            text = reply_text(field_of(response, "content"), source=source, model=self._model_name)
            usage = field_of(response, "usage")
            # Anthropic's input_tokens are those after the last breakpoint; the cache's reads and writes come apart.
            read = usage_field(usage, "cache_read_input_tokens")
            write = usage_field(usage, "cache_creation_input_tokens")
            plain = field_of(usage, "input_tokens")
            return reply_of(
                text,
                model=self._model_name,
                messages=messages,
                input_tokens=with_cache_tokens(plain, read, write),
                output_tokens=field_of(usage, "output_tokens"),
                near_rate_limit=out_of_requests(raw.headers),
                cache_read_tokens=read,
                cache_write_tokens=write,
                truncated=cut_at_cap(field_of(response, "stop_reason")),
            )
