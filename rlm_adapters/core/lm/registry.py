"""Backend names to model clients.

Built in: ``openai`` (and the OpenAI-compatible gateways ``vllm``, ``openrouter``, ``portkey``, ``vercel``),
``azure_openai``, ``anthropic``, ``bedrock``, ``gemini``, ``litellm``, ``scripted``, ``langchain`` (any
LangChain chat model) and ``llama_index`` (any LlamaIndex LLM).
`register_backend` adds more. A backend may also be given as an `LMClient` instance directly.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from rlm_adapters.core.lm.base import LMClient
from rlm_adapters.errors import ConfigurationError

BackendFactory = Callable[..., LMClient]

# name -> "module:attribute", imported on first use so optional SDKs stay optional.
_LAZY: dict[str, str] = {
    "openai": "rlm_adapters.core.lm.openai_client:OpenAIClient",
    "anthropic": "rlm_adapters.core.lm.anthropic_client:AnthropicClient",
    "scripted": "rlm_adapters.core.lm.scripted:ScriptedModel",
    "langchain": "rlm_adapters.core.lm.langchain_client:LangChainClient",
    "llama_index": "rlm_adapters.core.lm.llama_index_client:LlamaIndexClient",
    "azure_openai": "rlm_adapters.core.lm.azure_client:AzureOpenAIClient",
    "bedrock": "rlm_adapters.core.lm.bedrock_client:BedrockClient",
    "gemini": "rlm_adapters.core.lm.gemini_client:GeminiClient",
    "litellm": "rlm_adapters.core.lm.litellm_client:LiteLLMClient",
}
_REGISTERED: dict[str, BackendFactory] = {}


def _openai_compatible(default_base_url: str | None, key_variable: str | None) -> BackendFactory:
    def factory(**kwargs: Any) -> LMClient:
        from rlm_adapters.core.lm.openai_client import OpenAIClient

        if default_base_url and "base_url" not in kwargs:
            kwargs["base_url"] = default_base_url
        if key_variable and "api_key" not in kwargs:
            if os.environ.get(key_variable):
                kwargs["api_key"] = os.environ[key_variable]
            elif kwargs.get("base_url") == default_base_url:
                # The hosted gateway answers 401 without a key: say so now, not at the first call.
                raise ConfigurationError(f"no API key: set {key_variable} or pass backend_kwargs={{'api_key': ...}}")
        return OpenAIClient(**kwargs)

    return factory


_REGISTERED["vllm"] = _openai_compatible(None, None)
_REGISTERED["openrouter"] = _openai_compatible("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY")
_REGISTERED["vercel"] = _openai_compatible("https://ai-gateway.vercel.sh/v1", "AI_GATEWAY_API_KEY")

# Portkey's gateway settings, sent as its x-portkey-* headers.
PORTKEY_HEADERS = {
    "portkey_api_key": "x-portkey-api-key",
    "config": "x-portkey-config",
    "virtual_key": "x-portkey-virtual-key",
    "provider": "x-portkey-provider",
    "trace_id": "x-portkey-trace-id",
}


def _portkey(**kwargs: Any) -> LMClient:
    """Portkey's OpenAI-compatible gateway: ``portkey_api_key`` (else ``PORTKEY_API_KEY``) and a ``config``
    id, ``virtual_key`` or ``provider`` choose where requests go; ``api_key`` is the provider's key when the
    config does not hold one."""
    from rlm_adapters.core.lm.openai_client import OpenAIClient

    headers = dict(kwargs.pop("default_headers", None) or {})
    for key, header in PORTKEY_HEADERS.items():
        if key in kwargs:
            headers[header] = str(kwargs.pop(key))
    headers.setdefault("x-portkey-api-key", os.environ.get("PORTKEY_API_KEY", ""))
    if not headers["x-portkey-api-key"]:
        raise ConfigurationError(
            "no Portkey API key: set PORTKEY_API_KEY or pass backend_kwargs={'portkey_api_key': ...}"
        )
    kwargs.setdefault("base_url", os.environ.get("PORTKEY_BASE_URL") or "https://api.portkey.ai/v1")
    kwargs.setdefault("api_key", "portkey")  # the gateway authenticates with the header; the SDK wants a key
    return OpenAIClient(default_headers=headers, **kwargs)


_REGISTERED["portkey"] = _portkey


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``backend=name`` build clients with ``factory(**backend_kwargs)``."""
    _REGISTERED[name] = factory


def backend_names() -> list[str]:
    """Every backend name `make_client` accepts."""
    return sorted({*_LAZY, *_REGISTERED})


def make_client(backend: str | LMClient, kwargs: dict[str, Any] | None = None) -> LMClient:
    """Build the client for ``backend`` with ``backend_kwargs``.

    Raises:
        ConfigurationError: for an unknown backend name or missing settings.
    """
    if isinstance(backend, LMClient):
        return backend
    kwargs = dict(kwargs or {})
    if not isinstance(backend, str):
        raise ConfigurationError(
            f"backend={backend!r} is neither a backend name nor a model client; use one of {backend_names()}"
        )
    if backend in _REGISTERED:
        return _build(backend, _REGISTERED[backend], kwargs)
    if backend not in _LAZY:
        raise ConfigurationError(f"unknown backend {backend!r}; use one of {backend_names()}")
    module_name, _, attribute = _LAZY[backend].partition(":")
    factory: BackendFactory = getattr(importlib.import_module(module_name), attribute)
    if backend == "scripted":
        replies = kwargs.pop("replies", None)
        if replies is None:
            raise ConfigurationError("backend='scripted' needs backend_kwargs={'replies': fn or [...]} ")
        return factory(replies, **kwargs)
    return _build(backend, factory, kwargs)


def _build(backend: str, factory: BackendFactory, kwargs: dict[str, Any]) -> LMClient:
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise ConfigurationError(
            f"bad backend_kwargs for backend {backend!r}: {exc} (got keys {sorted(kwargs)})"
        ) from exc


def owns_client(backend: str | LMClient) -> bool:
    """True when the engine built the client (and so must close it)."""
    return not isinstance(backend, LMClient)
