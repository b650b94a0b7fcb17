"""The engine behind a `ChatRLM`: its settings, and LangChain's standard parameters, as an `RLM`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.lm.base import LMClient
from rlm_adapters.core.rlm import RLM

if TYPE_CHECKING:
    from rlm_adapters.langchain._chat import ChatRLM

# Backends configured by LangChain's standard parameters (model, temperature, api_key, ...).
SDK_BACKENDS = frozenset({"openai", "anthropic", "vllm", "openrouter"})
# Backends that take the model's name but whose SDKs have their own names for the other settings.
NAMED_BACKENDS = frozenset({"azure_openai", "bedrock", "gemini", "litellm", "vercel", "portkey"})


def _sdk_kwargs(llm: ChatRLM, kwargs: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    out = dict(kwargs)
    standard = {
        "temperature": llm.temperature,
        "max_tokens": llm.max_tokens,
        "timeout": llm.timeout,
        "max_retries": llm.max_retries,
        "base_url": llm.base_url,
        "api_key": llm.api_key.get_secret_value() if llm.api_key else None,
    }
    out.update({k: v for k, v in standard.items() if v is not None and k not in out})
    if model:
        out["model_name"] = model
    return out


def build_engine(llm: ChatRLM, model_override: str | None = None, *, persistent: bool = False) -> RLM:
    """A fresh `RLM` configured from `llm`'s settings (cheap: clients are built per run anyway).

    LangChain's standard parameters (model, temperature, api_key, ...) fill in what the SDK backends' own
    settings leave unset; `root_model` / `sub_model` replace the backends with LangChain chat models.

    Args:
        llm: The chat model whose settings the engine takes.
        model_override: The root model's name for this call (a ``model`` keyword argument).
        persistent: Keep one sandbox across calls (a thread's engine).
    """
    backend: str | LMClient
    backend_kwargs: dict[str, Any]
    if llm.root_model is not None:
        backend, backend_kwargs = "langchain", {"model": llm.root_model}
    elif llm.backend in SDK_BACKENDS:
        backend = llm.backend
        backend_kwargs = _sdk_kwargs(llm, llm.backend_kwargs, model_override or llm.model_name)
    else:
        backend, backend_kwargs = llm.backend, dict(llm.backend_kwargs)
        model = model_override or llm.model_name
        if backend in NAMED_BACKENDS and model:
            backend_kwargs["model_name"] = model
    if llm.sub_model is not None:
        others: list[str | LMClient] = ["langchain"]
        other_kwargs: list[dict[str, Any]] = [{"model": llm.sub_model}]
    else:
        others = list(llm.other_backends)
        given = llm.other_backend_kwargs or [{} for _ in others]
        other_kwargs = [
            _sdk_kwargs(llm, k, None) if b in SDK_BACKENDS else dict(k) for b, k in zip(others, given, strict=False)
        ]
    return RLM(
        backend=backend,
        backend_kwargs=backend_kwargs,
        other_backends=others,
        other_backend_kwargs=other_kwargs,
        environment=llm.environment,
        environment_kwargs=llm.environment_kwargs,
        max_depth=llm.max_depth,
        max_iterations=llm.max_iterations,
        max_root_tokens=llm.max_root_tokens,
        max_sub_tokens=llm.max_sub_tokens,
        max_cost=llm.max_cost,
        timeout=llm.run_timeout,
        max_concurrency=llm.max_concurrency,
        max_sub_calls=llm.max_sub_calls,
        logger=llm.logger,
        prices=llm.prices,
        persistent=persistent,
    )
