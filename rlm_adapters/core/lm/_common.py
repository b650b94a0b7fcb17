"""Small pieces the provider clients share: settings checks and message shapes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.errors import ConfigurationError


def check_keys(backend: str, kwargs: dict[str, Any], allowed: Iterable[str]) -> None:
    """Refuse a `backend_kwargs` key the backend does not know, naming it (and the closest known key).

    Raises:
        ConfigurationError: for the first unknown key.
    """
    known = sorted(set(allowed))
    for key in kwargs:
        if key not in known:
            import difflib  # only for this message: not loaded by every first call

            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigurationError(
                f"backend {backend!r} does not know backend_kwargs key {key!r}; {hint}known keys: {', '.join(known)}"
            )


def require_model_name(backend: str, model_name: Any) -> str:
    """The model name, or a clear error when it is missing."""
    if not model_name or not isinstance(model_name, str):
        raise ConfigurationError(f"the {backend} backend needs backend_kwargs['model_name'], got {model_name!r}")
    return model_name


def split_system(messages: list[Message]) -> tuple[str, list[Message]]:
    """The system messages joined into one text, and the other turns in order."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    return system, [m for m in messages if m["role"] != "system"]


def estimated_input(messages: list[Message]) -> int:
    """Input tokens estimated from the text, for providers that report none."""
    return sum(estimate_tokens(m["content"]) for m in messages)
