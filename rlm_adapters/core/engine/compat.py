"""The reference RLM's (``rlms``) spellings, read into ours in one place.

`RLM.__init__` accepts the reference's names beside ours: ``max_timeout`` (our ``run_timeout``), ``max_budget``
(``max_cost``), ``environment="ipython"``, ``sampling_args`` / ``sub_sampling_args`` and
``backend_kwargs["sampling_args"]``; ``raise_on_budget=True`` raises the reference's exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlm_adapters.core.lm import LMClient
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.settings import RLMSettings
from rlm_adapters.errors import ConfigurationError, raise_reference_error

# The reference's IPython REPL is a persistent namespace that echoes a cell's last expression: our
# subprocess worker is exactly that, behind the default walls.
ENVIRONMENTS = {"ipython": "subprocess"}


def either(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    """One option given under our name or the reference's, not both."""
    if alias_value is None:
        return value
    if value is not None:
        raise ConfigurationError(f"give {name}={value!r} or {alias}={alias_value!r}, not both (the same limit)")
    return alias_value


def environment(name: str) -> str:
    """Our sandbox kind for an ``environment=`` name (the reference's names mapped, ours unchanged)."""
    return ENVIRONMENTS.get(name, name)


def apply_sampling(
    backend: str | LMClient,
    backend_kwargs: Mapping[str, Any] | None,
    other_backends: Sequence[str | LMClient] | None,
    other_backend_kwargs: Sequence[Mapping[str, Any]] | None,
    sampling_args: Mapping[str, Any] | None,
    sub_sampling_args: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[str | LMClient] | None, list[dict[str, Any]] | None]:
    """Merge the reference's `sampling_args` / `sub_sampling_args` into the backends' request options.

    The reference also reads ``backend_kwargs["sampling_args"]``; it is unpacked the same way. Without
    other backends, `sub_sampling_args` mirror the root backend as the sub-model, as the reference does.
    """
    root_kwargs = dict(backend_kwargs or {})
    nested = root_kwargs.pop("sampling_args", None) or {}
    root_kwargs.update({**nested, **dict(sampling_args or {})})
    if (nested or sampling_args) and not isinstance(backend, str):
        raise ConfigurationError("sampling_args need a backend name; set them on the model client instance itself")
    others = list(other_backends) if other_backends is not None else None
    other_kwargs = [dict(k) for k in other_backend_kwargs] if other_backend_kwargs is not None else None
    if other_kwargs:
        other_kwargs = [{**k, **(k.pop("sampling_args", None) or {})} for k in other_kwargs]
    if sub_sampling_args:
        if not others:
            others, other_kwargs = [backend], [{k: v for k, v in root_kwargs.items() if k not in (sampling_args or {})}]
        if not isinstance(others[0], str):
            raise ConfigurationError("sub_sampling_args need a backend name for the first other backend")
        other_kwargs = other_kwargs or [{}]
        other_kwargs[0] = {**other_kwargs[0], **dict(sub_sampling_args)}
    return root_kwargs, others, other_kwargs


def raise_for_limit(result: RLMResult, settings: RLMSettings) -> None:
    """With ``raise_on_budget=True``, raise the reference's exception for a run a limit ended; else return."""
    if not settings.raise_on_budget:
        return
    limits = settings.limits
    token_limits = {
        "root_tokens": limits.max_root_tokens,
        "sub_tokens": limits.max_sub_tokens,
        "max_tokens": settings.max_tokens,
        "max_errors": settings.max_errors,
    }
    raise_reference_error(result, limits.timeout, limits.max_cost, token_limits)
