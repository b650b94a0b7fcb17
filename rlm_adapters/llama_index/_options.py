"""The `RLM` behind a LlamaIndex adapter, from LlamaIndex LLMs and `RLM` options."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable
from typing import Any

from llama_index.core.llms import LLM

from rlm_adapters.core import RLM
from rlm_adapters.core.lm import LlamaIndexClient
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


def check_option_names(options: dict[str, Any], own: Iterable[str], where: str) -> None:
    """Refuse names that neither `RLM` nor the caller (`own`) takes, before any slow work (a folder's conversion).

    Raises:
        TypeError: As Python says it for an unknown keyword argument, with the closest known name.
    """
    known = {*inspect.signature(RLM.__init__).parameters, *own} - {"self"}
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]}=?)" if close else ""
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}{hint}")
