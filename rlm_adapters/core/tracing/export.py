"""``RLM_TRACING``: a tracer provider for a process that sets up none itself (``rlm-mcp``, ``rlm ask``).

``RLM_TRACING=otlp`` exports spans with OTLP over HTTP, configured by OpenTelemetry's own variables
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``); ``RLM_TRACING=console`` writes them to stderr (stdout
is the MCP protocol's). It needs the ``otlp`` extra (the OpenTelemetry SDK and OTLP exporter). A process
that already has a provider (``opentelemetry-instrument rlm-mcp``) keeps it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.errors import ConfigurationError

VARIABLE = "RLM_TRACING"
OFF = frozenset({"", "0", "off", "false", "none", "no"})


def configure_from_environment(service: str, environ: dict[str, str] | None = None) -> Any:
    """Set the global tracer provider as ``RLM_TRACING`` asks; the provider made, or None.

    Args:
        service: ``service.name`` when ``OTEL_SERVICE_NAME`` does not give one.
        environ: The environment (default: the process's).

    Raises:
        ConfigurationError: ``RLM_TRACING`` has another value.
        MissingExtraError: the OpenTelemetry SDK or the OTLP exporter is not installed.
    """
    environ = dict(os.environ if environ is None else environ)
    choice = environ.get(VARIABLE, "").strip().lower()
    if choice in OFF:
        return None
    if choice not in ("otlp", "console"):
        raise ConfigurationError(f"{VARIABLE}={environ[VARIABLE]!r} must be otlp, console or off")
    trace = require("opentelemetry.trace", extra="otlp", feature=f"{VARIABLE}={choice}")
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None  # configured already (opentelemetry-instrument, the application)
    sdk = require("opentelemetry.sdk.trace", extra="otlp", feature=f"{VARIABLE}={choice}")
    export = require("opentelemetry.sdk.trace.export", extra="otlp", feature=f"{VARIABLE}={choice}")
    resources = require("opentelemetry.sdk.resources", extra="otlp", feature=f"{VARIABLE}={choice}")
    attributes = {} if environ.get("OTEL_SERVICE_NAME") else {"service.name": service}
    provider = sdk.TracerProvider(resource=resources.Resource.create(attributes))
    if choice == "otlp":
        otlp = require(
            "opentelemetry.exporter.otlp.proto.http.trace_exporter", extra="otlp", feature=f"{VARIABLE}=otlp"
        )
        provider.add_span_processor(export.BatchSpanProcessor(otlp.OTLPSpanExporter()))
    else:
        provider.add_span_processor(export.SimpleSpanProcessor(export.ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)
    return provider
