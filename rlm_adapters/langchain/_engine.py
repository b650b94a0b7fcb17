"""The engine behind a `ChatRLM`: the fields that configure it, and the `RLM` they make.

`EngineFields` is the part of `ChatRLM` that is not LangChain plumbing; `ChatRLM` inherits it, so this module
never needs the chat model itself. A field that is an `RLM` option is one line, ``rlm_option(keyword)``: its
default and doc come from the option's declaration (`core.settings`), and `build_engine` passes it on.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field, JsonValue, SecretStr, field_validator, model_validator

from rlm_adapters.core import RLM, RLMLogger
from rlm_adapters.core.adapter_kit import CHAT_DIRECT_BELOW_TOKENS, OPTIONS
from rlm_adapters.core.cache import CallCache, open_cache
from rlm_adapters.core.lm import LMClient

# Backends configured by LangChain's standard parameters (model, temperature, api_key, ...).
SDK_BACKENDS = frozenset({"openai", "anthropic", "vllm", "openrouter"})
# Backends that take the model's name but whose SDKs have their own names for the other settings.
NAMED_BACKENDS = frozenset({"azure_openai", "bedrock", "gemini", "litellm", "vercel", "portkey"})
RLM_KEYWORD = "rlm_keyword"  # the `json_schema_extra` key naming the `RLM` keyword a field sets


def rlm_option(keyword: str, default: Any = OPTIONS) -> Any:
    """A field that is the `RLM` option `keyword` (`core.settings.OPTIONS`): its default and description come
    from the option's declaration (`default`: a chat model's own default instead), and `build_engine` passes
    it on under that keyword."""
    declared = OPTIONS[keyword]
    extra: dict[str, JsonValue] = {RLM_KEYWORD: keyword}
    if default is not OPTIONS:
        return Field(default=default, description=declared.option.doc, json_schema_extra=extra)
    if declared.default is None and declared.type.startswith("Mapping"):
        return Field(default_factory=dict, description=declared.option.doc, json_schema_extra=extra)
    return Field(default=declared.default, description=declared.option.doc, json_schema_extra=extra)


class EngineFields(BaseModel):
    """The fields of a `ChatRLM` that configure its engine (each is documented on `ChatRLM`)."""

    model_config = ConfigDict(populate_by_name=True, protected_namespaces=(), arbitrary_types_allowed=True)

    model_name: str | None = Field(default=None, alias="model")
    temperature: float | None = None
    max_tokens: int | None = None
    # LangChain's standard ``timeout`` (as ChatOpenAI's ``request_timeout``): one model request, not the run.
    request_timeout: float | None = Field(default=None, alias="timeout")
    max_retries: int | None = None
    api_key: SecretStr | None = None
    base_url: str | None = None
    root_model: BaseChatModel | None = None
    sub_model: BaseChatModel | None = None
    backend: str | LMClient = "openai"
    backend_kwargs: dict[str, Any] = Field(default_factory=dict)
    other_backends: list[str | LMClient] = Field(default_factory=list)
    other_backend_kwargs: list[dict[str, Any]] | None = None
    environment: str = rlm_option("environment")
    environment_kwargs: dict[str, Any] = rlm_option("environment_kwargs")
    max_depth: int = rlm_option("max_depth")
    max_iterations: int = rlm_option("max_iterations")
    max_root_tokens: int = rlm_option("max_root_tokens")
    max_sub_tokens: int = rlm_option("max_sub_tokens")
    max_cost: float | None = rlm_option("max_cost")
    run_timeout: float | None = rlm_option("run_timeout")
    max_sub_calls: int | None = rlm_option("max_sub_calls")
    max_concurrency: int = rlm_option("max_concurrency")
    context_preview_chars: int = rlm_option("context_preview_chars")
    max_reply_tokens: int | None = rlm_option("max_reply_tokens")
    cell_timeout: float | None = rlm_option("cell_timeout")
    sources_timeout: float | None = rlm_option("sources_timeout")
    # A drop-in for a plain chat model: short prompts are plain calls (docs/langchain.md says why).
    direct_below_tokens: int | None = rlm_option("direct_below_tokens", CHAT_DIRECT_BELOW_TOKENS)
    logger: RLMLogger | None = None
    prices: dict[str, tuple[float, float]] = rlm_option("prices")
    call_cache: Any = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, data: Any) -> Any:
        # Pydantic's default drops an unknown keyword in silence: a misspelt max_reply_tokens would run uncapped.
        if isinstance(data, dict):
            known = {name for name in cls.model_fields} | {
                f.alias for f in cls.model_fields.values() if f.alias is not None
            }
            unknown = sorted(str(key) for key in data if key not in known)
            if unknown:
                import difflib

                close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"{cls.__name__} got an unexpected keyword argument {unknown[0]!r}{hint}")
        return data

    @model_validator(mode="before")
    @classmethod
    def _route_cache(cls, data: Any) -> Any:
        # LangChain's chat models have a `cache` of their own (a BaseCache or a bool: the whole answer). A
        # path or a CallCache given as `cache=` is the engine's call cache instead; LangChain's values keep
        # LangChain's meaning.
        if isinstance(data, dict) and is_call_cache(data.get("cache")):
            if data.get("call_cache") is not None:
                raise ValueError("give the call cache once: cache= or call_cache=, not both")
            data = {**data, "call_cache": data["cache"], "cache": None}
        return data

    @field_validator("call_cache", mode="before")
    @classmethod
    def _open_cache(cls, value: Any) -> CallCache | None:
        # A path is opened (and checked) once here: every call's engine then shares the one store.
        store, _owned = open_cache(value)
        return store

    @model_validator(mode="after")
    def _check_engine(self) -> EngineFields:
        # Build the engine once so a missing key, model or bad limit fails here, not at the first call.
        build_engine(self)
        return self


def is_call_cache(value: Any) -> bool:
    """A value of ``cache=`` that names the engine's call cache (a path or a `CallCache`), not LangChain's."""
    return isinstance(value, str | os.PathLike | CallCache)


def _sdk_kwargs(fields: EngineFields, kwargs: Mapping[str, Any], model: str | None) -> dict[str, Any]:
    out = dict(kwargs)
    standard = {
        "temperature": fields.temperature,
        "max_tokens": fields.max_tokens,
        "timeout": fields.request_timeout,
        "max_retries": fields.max_retries,
        "base_url": fields.base_url,
        "api_key": fields.api_key.get_secret_value() if fields.api_key else None,
    }
    out.update({k: v for k, v in standard.items() if v is not None and k not in out})
    if model:
        out["model_name"] = model
    return out


def build_engine(fields: EngineFields, model_override: str | None = None, *, persistent: bool = False) -> RLM:
    """A fresh `RLM` configured from a chat model's fields (cheap: clients are built per run anyway).

    LangChain's standard parameters (model, temperature, api_key, ...) fill in what the SDK backends' own
    settings leave unset; `root_model` / `sub_model` replace the backends with LangChain chat models.

    Args:
        fields: The chat model (its `EngineFields`).
        model_override: The root model's name for this call (a ``model`` keyword argument).
        persistent: Keep one sandbox across calls (a thread's engine).
    """
    backend: str | LMClient
    backend_kwargs: dict[str, Any]
    if fields.root_model is not None:
        backend, backend_kwargs = "langchain", {"model": fields.root_model}
    elif fields.backend in SDK_BACKENDS:
        backend = fields.backend
        backend_kwargs = _sdk_kwargs(fields, fields.backend_kwargs, model_override or fields.model_name)
    else:
        backend, backend_kwargs = fields.backend, dict(fields.backend_kwargs)
        model = model_override or fields.model_name
        if backend in NAMED_BACKENDS and model:
            backend_kwargs["model_name"] = model
    if fields.sub_model is not None:
        others: list[str | LMClient] = ["langchain"]
        other_kwargs: list[dict[str, Any]] = [{"model": fields.sub_model}]
    else:
        others = list(fields.other_backends)
        given = [{} for _ in others] if fields.other_backend_kwargs is None else fields.other_backend_kwargs
        if len(given) != len(others):
            other_kwargs = [dict(k) for k in given]  # `RLM` refuses them, naming both counts
        else:
            other_kwargs = [
                _sdk_kwargs(fields, k, None) if b in SDK_BACKENDS else dict(k)
                for b, k in zip(others, given, strict=True)
            ]
    return RLM(
        backend=backend,
        backend_kwargs=backend_kwargs,
        other_backends=others,
        other_backend_kwargs=other_kwargs,
        logger=fields.logger,
        persistent=persistent,
        cache=fields.call_cache,
        # The chat model raises `RLMRunFailed` itself: with structured output, a failed run's last value
        # goes to the parser instead.
        raise_on_error=False,
        **rlm_options(fields),
    )


def rlm_options(fields: EngineFields) -> dict[str, Any]:
    """The `RLM` options a chat model's fields set, by `RLM` keyword (`rlm_option` fields)."""
    options: dict[str, Any] = {}
    for name, info in type(fields).model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and RLM_KEYWORD in extra:
            options[str(extra[RLM_KEYWORD])] = getattr(fields, name)
    return options


def options_doc(indent: str) -> str:
    """The ``Args:`` entries of the fields that are `RLM` options, from the options' declarations."""
    lines = []
    for name, info in EngineFields.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and RLM_KEYWORD in extra:
            keyword = str(extra[RLM_KEYWORD])
            alias = "" if keyword == name else f" (`RLM`'s ``{keyword}``)"
            text = f"{name}: {info.description}{alias}"
            lines.append(textwrap.fill(text, 110, initial_indent=indent, subsequent_indent=indent + "    "))
    return "\n".join(lines)
