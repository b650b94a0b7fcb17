"""Backend names to model clients.

Built in: ``openai`` (and the OpenAI-compatible gateways ``vllm``, ``openrouter``, ``portkey``, ``vercel``),
``azure_openai``, ``anthropic``, ``bedrock``, ``gemini``, ``litellm``, ``scripted``, ``langchain`` (any
LangChain chat model) and ``llama_index`` (any LlamaIndex LLM).
`register_backend` adds more. A backend may also be given as an `LMClient` instance directly.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from rlm_adapters.core.lm.base import ChecksCredentials, LMClient, ModelClient, declared
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
    # OpenAI-compatible gateways
    "vllm": "rlm_adapters.core.lm.gateways:vllm",
    "openrouter": "rlm_adapters.core.lm.gateways:openrouter",
    "vercel": "rlm_adapters.core.lm.gateways:vercel",
    "portkey": "rlm_adapters.core.lm.gateways:portkey",
}
# Process-wide: what `register_backend` added (docs/internals.md, "Process-wide state").
_REGISTERED: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory) -> None:
    """Make ``backend=name`` build clients with ``factory(**backend_kwargs)``.

    The registration lasts for the process (a registered name wins over a built-in one of the same name);
    `rlm_adapters.testing.reset_process_state` forgets it.
    """
    _REGISTERED[name] = factory


def forget_registered_backends() -> None:
    """Forget every backend `register_backend` added; the built-in names stay."""
    _REGISTERED.clear()


def backend_names() -> list[str]:
    """Every backend name `make_client` accepts."""
    return sorted({*_LAZY, *_REGISTERED})


def make_client(backend: str | LMClient, kwargs: dict[str, Any] | None = None) -> ModelClient:
    """Build the client for ``backend`` with ``backend_kwargs`` (a client given as the backend: as it is, in
    `ModelClient`'s shape).

    Raises:
        ConfigurationError: for an unknown backend name or missing settings.
    """
    if isinstance(backend, LMClient):
        return declared(backend)
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
        return declared(factory(replies, **kwargs))
    return _build(backend, factory, kwargs)


def credentials_problem(backend: str, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """Why `backend` with `settings` and `environ` reaches no model, worded for flags and variables, or None:
    the backend's own check (`ModelClient.credentials_problem`; None for a backend that has none)."""
    factory = _REGISTERED.get(backend)
    if factory is None and backend in _LAZY and backend != "scripted":
        module_name, _, attribute = _LAZY[backend].partition(":")
        factory = getattr(importlib.import_module(module_name), attribute)
    return factory.credentials_problem(settings, environ) if isinstance(factory, ChecksCredentials) else None


def _build(backend: str, factory: BackendFactory, kwargs: dict[str, Any]) -> ModelClient:
    try:
        return declared(factory(**kwargs))
    except TypeError as exc:
        raise ConfigurationError(
            f"bad backend_kwargs for backend {backend!r}: {exc} (got keys {sorted(kwargs)})"
        ) from exc


def owns_client(backend: str | LMClient) -> bool:
    """True when the engine built the client (and so must close it)."""
    return not isinstance(backend, LMClient)
