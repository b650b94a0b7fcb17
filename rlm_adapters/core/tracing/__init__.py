"""OpenTelemetry spans of a run, following the GenAI semantic conventions (docs/tracing.md).

A run is traced when ``RLM(tracing=True)`` (or a ``TracerProvider`` is given), or, with the default
``tracing=None``, when OpenTelemetry is loaded and a tracer provider is configured (an SDK's, the one
``opentelemetry-instrument`` sets up, or Langfuse's / Logfire's / Phoenix's). `RunTracer` is one more
subscriber of the run's event stream: the loop does nothing for it. This face imports OpenTelemetry only
when a run is traced.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm import ModelClient
from rlm_adapters.core.tracing._attributes import CONTENT_VARIABLE, content_enabled, provider_name
from rlm_adapters.core.tracing.export import configure_from_environment
from rlm_adapters.errors import ConfigurationError

if TYPE_CHECKING:
    from rlm_adapters.core.tracing._spans import RunTracer

INSTRUMENTATION = "rlm_adapters"
# What `RLM(tracing=...)` takes: None (on when a provider is configured), True / False, or a TracerProvider.
Tracing = bool | None | Any


def check_tracing(option: Tracing) -> Tracing:
    """`option` when it is usable; ``True`` without OpenTelemetry raises `MissingExtraError` naming ``otel``.

    Raises:
        ConfigurationError: `option` is neither a bool, None, nor an object with ``get_tracer``.
    """
    if option is True:
        require("opentelemetry.trace", extra="otel", feature="RLM(tracing=True)")
    elif not (option is None or option is False or callable(getattr(option, "get_tracer", None))):
        raise ConfigurationError(
            f"tracing={option!r:.80} must be True, False, None (on when a tracer provider is configured) or an "
            "OpenTelemetry TracerProvider"
        )
    return option


def _configured_provider() -> Any:
    """The global tracer provider when one was set, else None (OpenTelemetry not loaded counts as none)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def tracer_for(option: Tracing, clients: Iterable[ModelClient]) -> RunTracer | None:
    """The `RunTracer` for one run, or None when the run is not traced.

    Args:
        option: The RLM's ``tracing``.
        clients: The run's model clients (for ``gen_ai.provider.name``).
    """
    if option is False:
        return None
    if option is None or option is True:
        provider = _configured_provider()
        if provider is None:
            if option is None:
                return None
            trace = require("opentelemetry.trace", extra="otel", feature="RLM(tracing=True)")
            provider = trace.get_tracer_provider()  # a later-configured provider still gets the spans
    else:
        provider = option
    spans = importlib.import_module("rlm_adapters.core.tracing._spans")
    tracer = provider.get_tracer(INSTRUMENTATION, _version())
    providers = {client.model_name: provider_name(client) for client in clients}
    result: RunTracer = spans.RunTracer(tracer, providers, content=content_enabled())
    return result


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlm-adapters")
    except PackageNotFoundError:
        return "0"


__all__ = [
    "CONTENT_VARIABLE",
    "Tracing",
    "check_tracing",
    "configure_from_environment",
    "content_enabled",
    "tracer_for",
]
