"""Which model, from command-line flags and environment variables: for `rlm ask`, `rlm eval` and `rlm-mcp`.

Variables: ``RLM_MODEL`` (root model), ``RLM_SUB_MODEL`` (sub-model, optional), ``RLM_BACKEND``
(``openai`` by default, or any of `PROVIDER_BACKENDS`), ``OPENAI_BASE_URL`` (any OpenAI-compatible server),
and the providers' own credential variables (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``AWS_REGION`` and
the AWS chain, ``GEMINI_API_KEY``, ``AZURE_OPENAI_*``, ...). Flags win over variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rlm_adapters.errors import ConfigurationError

# Backends that flags and variables can name (the others take Python objects: langchain, llama_index, scripted).
PROVIDER_BACKENDS = (
    "openai",
    "anthropic",
    "azure_openai",
    "bedrock",
    "gemini",
    "litellm",
    "openrouter",
    "portkey",
    "vercel",
    "vllm",
)
MODEL_VARIABLES = "RLM_MODEL (and OPENAI_API_KEY or OPENAI_BASE_URL, or RLM_BACKEND=anthropic with ANTHROPIC_API_KEY)"
# The backends the command line offers, and the one help text `rlm ask` and `rlm eval` share.
CLI_BACKENDS = PROVIDER_BACKENDS
BACKEND_HELP = (
    "openai (default: OpenAI or any OpenAI-compatible server via --base-url), "
    f"{', '.join(b for b in PROVIDER_BACKENDS if b != 'openai')} (default: $RLM_BACKEND, else openai)"
)


def model_options(
    *,
    model: str | None = None,
    sub_model: str | None = None,
    backend: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`RLM` keyword arguments (backend, backend_kwargs, other_backends, other_backend_kwargs).

    Raises:
        ConfigurationError: when no model is configured, naming the variables to set.
    """
    env = os.environ if environ is None else environ
    backend = backend or env.get("RLM_BACKEND") or "openai"
    model = model or env.get("RLM_MODEL")
    if not model:
        raise ConfigurationError(f"no model configured: pass --model or set {MODEL_VARIABLES}")
    sub_model = sub_model or env.get("RLM_SUB_MODEL")
    common: dict[str, Any] = {}
    if backend in ("openai", "vllm"):
        url = base_url or env.get("OPENAI_BASE_URL")
        if url:
            common["base_url"] = url
    elif base_url:
        common["base_url"] = base_url
    if api_key:
        common["api_key"] = api_key
    options: dict[str, Any] = {"backend": backend, "backend_kwargs": {"model_name": model, **common}}
    if sub_model:
        options["other_backends"] = [backend]
        options["other_backend_kwargs"] = [{"model_name": sub_model, **common}]
    return options


def credentials_problem(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str | None:
    """Why `options` (from `model_options`) cannot reach a model, worded for the command line, or None.

    The model clients check the same things but speak of Python arguments (``backend_kwargs``); a
    command-line user can only set flags and environment variables, so each backend's front-end check
    (`rlm_adapters.core.lm.credentials_problem`) says which of those.
    """
    from rlm_adapters.core.lm import credentials_problem as backend_problem  # the model layer, when asked

    backend = options.get("backend")
    if not isinstance(backend, str):
        return None
    return backend_problem(backend, options.get("backend_kwargs") or {}, os.environ if environ is None else environ)
