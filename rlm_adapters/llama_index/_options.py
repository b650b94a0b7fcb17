"""The `RLM` behind a LlamaIndex adapter, from LlamaIndex LLMs and `RLM` options."""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import LLM

from rlm_adapters.core.lm.llama_index_client import LlamaIndexClient
from rlm_adapters.core.rlm import RLM
from rlm_adapters.errors import ConfigurationError


def rlm_from(llm: LLM | None, sub_llm: LLM | None, options: dict[str, Any]) -> RLM:
    """An `RLM` whose root model is `llm` and whose sub-model is `sub_llm` (when given), else `options`' backends.

    Raises:
        ConfigurationError: Both an LLM and the backend option it stands for were given, or an option is bad.
    """
    options = dict(options)
    if llm is not None:
        if "backend" in options:
            raise ConfigurationError("give either llm= or backend=, not both")
        options["backend"] = LlamaIndexClient(llm)
    if sub_llm is not None:
        if "other_backends" in options:
            raise ConfigurationError("give either sub_llm= or other_backends=, not both")
        options["other_backends"] = [LlamaIndexClient(sub_llm)]
        options.pop("other_backend_kwargs", None)
    return RLM(**options)
