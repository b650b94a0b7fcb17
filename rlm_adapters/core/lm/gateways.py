"""OpenAI-compatible gateways as thin factories over `OpenAIClient`: vLLM, OpenRouter, Vercel AI Gateway, Portkey.

Each only fills in the gateway's base URL, key variable and headers; requests, retries (the openai SDK's,
honouring ``Retry-After``), timeouts, usage and settings checks are the OpenAI client's. Errors and settings
messages name the gateway.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.errors import ConfigurationError

# Portkey's gateway settings, sent as its x-portkey-* headers.
PORTKEY_HEADERS = {
    "config": "x-portkey-config",
    "virtual_key": "x-portkey-virtual-key",
    "provider": "x-portkey-provider",
    "trace_id": "x-portkey-trace-id",
}


class GatewayClient(OpenAIClient):
    """`OpenAIClient` under a gateway's name (for its messages)."""

    def __init__(self, backend: str, provider: str, model_name: str, **kwargs: Any) -> None:
        self.backend = backend
        self.provider = provider
        super().__init__(model_name, **kwargs)


def openai_compatible(
    backend: str, provider: str, kwargs: dict[str, Any], default_base_url: str | None, key_variable: str | None
) -> OpenAIClient:
    """A client for an OpenAI-compatible gateway; its key from `key_variable` unless given."""
    kwargs = dict(kwargs)
    if default_base_url and "base_url" not in kwargs:
        kwargs["base_url"] = default_base_url
    if key_variable and "api_key" not in kwargs:
        if os.environ.get(key_variable):
            kwargs["api_key"] = os.environ[key_variable]
        elif kwargs.get("base_url") == default_base_url:
            # The hosted gateway answers 401 without a key: say so now, not at the first call.
            raise ConfigurationError(
                f"no {provider} API key: set {key_variable} or pass backend_kwargs={{'api_key': ...}}"
            )
    return GatewayClient(backend, provider, **kwargs)


@dataclass(frozen=True)
class Gateway:
    """An OpenAI-compatible gateway, called as its backend's factory: ``vllm(model_name=..., base_url=...)``.

    Attributes:
        backend: Its backend name.
        provider: Its name in messages.
        base_url: Its hosted address (None: the user's server, given as ``base_url``).
        key_variable: The environment variable its key comes from (None: it needs no key).
        build: How its client is made, when it needs more than a base URL and a key (Portkey's headers).
    """

    backend: str
    provider: str
    base_url: str | None
    key_variable: str | None
    build: Callable[..., OpenAIClient] | None = None

    def __call__(self, **kwargs: Any) -> OpenAIClient:
        if self.build is not None:
            return self.build(**kwargs)
        return openai_compatible(self.backend, self.provider, kwargs, self.base_url, self.key_variable)

    def credentials_problem(self, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        """See `ModelClient.credentials_problem`: the gateway's key, or a server's address."""
        if settings.get("api_key"):
            return None
        if self.key_variable is None:
            if settings.get("base_url"):
                return None
            return f"the {self.backend} backend needs the server's address: pass --base-url or set OPENAI_BASE_URL"
        return None if environ.get(self.key_variable) else f"no {self.provider} API key: set {self.key_variable}"


# Any OpenAI-compatible server (vLLM, Ollama, llama.cpp) at ``base_url``.
vllm = Gateway("vllm", "OpenAI-compatible server", None, None)
# OpenRouter: ``api_key`` or ``OPENROUTER_API_KEY``.
openrouter = Gateway("openrouter", "OpenRouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY")
# Vercel AI Gateway: ``api_key`` or ``AI_GATEWAY_API_KEY``; models as ``provider/model``.
vercel = Gateway("vercel", "Vercel AI Gateway", "https://ai-gateway.vercel.sh/v1", "AI_GATEWAY_API_KEY")


def _portkey(**kwargs: Any) -> OpenAIClient:
    """Portkey's gateway. ``api_key`` (as in the reference RLM; or ``portkey_api_key``, else ``PORTKEY_API_KEY``)
    is the Portkey key; a ``config`` id, ``virtual_key``, ``provider`` or a catalog model (``@openai/gpt-5``)
    chooses where requests go; ``provider_api_key`` is the provider's key when none of those holds one."""
    headers = dict(kwargs.pop("default_headers", None) or {})
    portkey_key = (
        kwargs.pop("portkey_api_key", None) or kwargs.pop("api_key", None) or os.environ.get("PORTKEY_API_KEY")
    )
    if not portkey_key:
        raise ConfigurationError(
            "no Portkey API key: set PORTKEY_API_KEY or pass backend_kwargs={'api_key': ...} (the Portkey key)"
        )
    headers["x-portkey-api-key"] = str(portkey_key)
    for key, header in PORTKEY_HEADERS.items():
        if key in kwargs:
            headers[header] = str(kwargs.pop(key))
    kwargs.setdefault("base_url", os.environ.get("PORTKEY_BASE_URL") or "https://api.portkey.ai/v1")
    # The SDK sends its key as the bearer token: the provider's when given, else Portkey's (which the gateway
    # accepts for its model catalog and configs).
    kwargs["api_key"] = kwargs.pop("provider_api_key", None) or portkey_key
    return GatewayClient("portkey", "Portkey", default_headers=headers, **kwargs)


portkey = Gateway("portkey", "Portkey", "https://api.portkey.ai/v1", "PORTKEY_API_KEY", build=_portkey)
