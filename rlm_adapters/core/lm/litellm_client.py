"""Every provider LiteLLM knows, through `litellm.acompletion`; usage and cost are LiteLLM's own figures.

LiteLLM's and the underlying SDK's retries are switched off (``num_retries=0``, ``max_retries=0``): the engine
retries (or the client, given ``max_retries``), honouring ``Retry-After``, through `call_with_retries`, which
also bounds each whole request (`timeout`), as for the other provider clients.

``max_reply_bytes`` is checked on the reply's text once LiteLLM has read it, not while it reads: LiteLLM
picks its HTTP stack per provider route (the openai SDK, its own httpx handler over aiohttp, boto3) and
caches those clients for the whole process, so there is no per-client place to stop a body mid-read.

Importing litellm fetches its model price map from the network unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is
set; this module sets it (when unset) before the import, so LiteLLM uses the map shipped in its wheel: an
import never waits on the network, and prices do not change under a running program. Set
``LITELLM_LOCAL_MODEL_COST_MAP=False`` to get LiteLLM's default behaviour back.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._reply import (
    check_text_size,
    cut_at_cap,
    field_of,
    openai_cache_reads,
    reading,
    reply_of,
    reply_text,
    usage_field,
)
from rlm_adapters.core.lm._retry import Failure, is_retryable_status, parse_retry_after
from rlm_adapters.core.lm._sdk_client import SDKClient
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.call_context import capped
from rlm_adapters.core.lm.reply_identity import request_identity
from rlm_adapters.errors import ConfigurationError, ModelError


def _litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = require("litellm", extra="litellm", feature="the litellm backend")
    litellm.suppress_debug_info = True  # type: ignore[attr-defined]  # else every failed call prints a "Give Feedback" banner to stdout
    return litellm


@functools.cache
def accepted_keys() -> tuple[frozenset[str], tuple[str, ...]]:
    """Keys LiteLLM names (acompletion's parameters and its own list), and provider prefixes (``aws_``, ...).

    LiteLLM forwards provider settings it lists nowhere (``aws_region_name``, ``vertex_project``), so a key
    with a provider's prefix is accepted too; anything else is a typo.
    """
    litellm = _litellm()
    from litellm.types.utils import all_litellm_params

    named = set(inspect.signature(litellm.acompletion).parameters) | set(all_litellm_params) | {"extra_body"}
    providers = {str(getattr(p, "value", p)) for p in litellm.provider_list} | {"aws", "vertex", "vertex_ai"}
    named -= {"model", "messages", "stream", "kwargs"}
    return frozenset(named), tuple(sorted(f"{p}_" for p in providers))


class LiteLLMClient(SDKClient):
    """An `LMClient` over `litellm.acompletion`.

    Args:
        model_name: LiteLLM's model string, e.g. ``"anthropic/claude-sonnet-4-5"``, ``"bedrock/..."``,
            ``"openai/my-model"`` with ``api_base`` for any OpenAI-compatible server.
        **kwargs: ``timeout`` (seconds per request, default 600), ``max_retries`` (the client retries;
            default: the engine does), and any `litellm.acompletion` setting (``api_base``, ``api_key``,
            ``temperature``, ``aws_region_name``, ...).
    """

    backend = "litellm"
    provider = "LiteLLM"

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        self._litellm = _litellm()
        super().__init__(model_name, kwargs, None)  # LiteLLM's keys are checked below, by name or prefix
        named, prefixes = accepted_keys()
        for key in kwargs:
            if key not in named and not key.startswith(prefixes):
                raise ConfigurationError(
                    f"backend 'litellm' does not know backend_kwargs key {key!r}: it is neither a litellm.acompletion "
                    "parameter nor a provider setting (such as aws_region_name); check its spelling"
                )
        kwargs.pop("num_retries", None)
        self._request = kwargs
        self._base_url = kwargs.get("api_base") or kwargs.get("base_url")

    @property
    def endpoint(self) -> str:
        """Where calls go (the engine learns a concurrency limit per endpoint): the API base, else the route."""
        return str(self._base_url or f"litellm:{self._model_name.split('/', 1)[0]}")

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: backend, endpoint, model, request settings (no secrets)."""
        return request_identity("litellm", self.endpoint, self._model_name, self._request)

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One completion through LiteLLM."""
        litellm = self._litellm
        own = self._request.get("max_tokens", self._request.get("max_completion_tokens"))
        cap = capped(own if isinstance(own, int) and not isinstance(own, bool) else None)
        request = {**self._request, "max_tokens": cap} if own is None and cap is not None else self._request

        async def attempt() -> Any:
            return await litellm.acompletion(
                model=self._model_name,
                messages=[dict(m) for m in messages],
                timeout=self._policy.request_timeout,
                num_retries=0,
                max_retries=0,
                **request,
            )

        response = await self._send(attempt, self._classify)
        source = f"LiteLLM call to model {self._model_name!r}"
        with reading(source, self._model_name):
            choices = field_of(response, "choices")
            if not isinstance(choices, list) or not choices:
                raise ModelError(f"{source} returned no choices: {str(response)[:200]!r}", model=self._model_name)
            content = field_of(field_of(choices[0], "message"), "content")
            text = reply_text(content, source=source, model=self._model_name)
            check_text_size(text, self._max_reply_bytes, source=source, model=self._model_name)
            usage = field_of(response, "usage")
            return reply_of(
                text,
                model=self._model_name,
                messages=messages,
                input_tokens=field_of(usage, "prompt_tokens"),
                output_tokens=field_of(usage, "completion_tokens"),
                cost=self._cost(response),
                # LiteLLM reports cache reads OpenAI's way for every provider, and Anthropic's writes as their own.
                cache_read_tokens=openai_cache_reads(usage),
                cache_write_tokens=usage_field(usage, "cache_creation_input_tokens"),
                truncated=cut_at_cap(field_of(choices[0], "finish_reason")),
            )

    def _cost(self, response: Any) -> float | None:
        """LiteLLM's cost of the call; None when LiteLLM has no price (the engine's price table decides)."""
        hidden = getattr(response, "_hidden_params", None) or {}
        cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
        if cost is None:
            try:
                cost = self._litellm.completion_cost(completion_response=response)
            except Exception:  # LiteLLM raises for a model missing from its price map
                return None
        try:
            value = float(cost) if cost else None
        except (TypeError, ValueError):
            return None
        return value if value is None or (math.isfinite(value) and value >= 0) else None

    def _classify(self, exc: Exception) -> Failure | None:
        import openai

        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.APITimeoutError) or type(exc).__name__ == "Timeout":
            return Failure(f"{type(exc).__name__}: {getattr(exc, 'message', exc)}", status=None, retryable=True)
        if isinstance(exc, openai.OpenAIError) or status is not None:
            headers = getattr(exc, "litellm_response_headers", None)
            if headers is None:
                headers = getattr(getattr(exc, "response", None), "headers", None)
            code = status if isinstance(status, int) else None
            return Failure(
                message=str(getattr(exc, "message", None) or exc),
                status=code,
                retryable=is_retryable_status(code) or isinstance(exc, openai.APIConnectionError),
                retry_after=parse_retry_after(dict(headers) if headers is not None else None),
            )
        if isinstance(exc, ValueError):
            return Failure(f"the response could not be read ({type(exc).__name__}: {exc})")
        return None
