"""What every run's SDK client would otherwise redo: the TLS context, and the platform string of its headers.

Clients are built per run (their connection pools bind to the run's event loop), so anything an SDK builds
per client is paid on every run. Two such costs are process-wide facts, computed once here:

- the TLS context: loading the CA bundle costs 40-250 ms, which `DefaultAsyncHttpxClient()` pays per client;
- the platform of the ``X-Stainless-OS`` header: the OpenAI and Anthropic SDKs compute it on a worker thread
  at each client's first request (``asyncify(get_platform)``), which starts the event loop's default
  executor and its thread, joined again when ``asyncio.run`` ends. The SDK's own `get_platform` is called
  here once (the platform module caches what it reads), and each new client is handed the answer.
"""

from __future__ import annotations

import functools
import importlib
import ssl
from typing import Any


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context per process, as the SDKs' HTTP library builds it by default."""
    try:  # the HTTP library of these SDK versions: httpx2 (openai >= 3, anthropic >= 2), else httpx
        import httpx2 as http
    except ImportError:
        import httpx as http  # type: ignore[no-redef]
    return http.create_ssl_context()


@functools.cache
def _platform(sdk: str) -> Any:
    """The SDK's own ``get_platform()`` (None when this SDK version has none)."""
    try:
        get_platform = importlib.import_module(f"{sdk}._base_client").get_platform
    except (ImportError, AttributeError):
        return None
    return get_platform()


def preset_platform(client: Any, sdk: str) -> Any:
    """Give a new SDK client (of the `sdk` package) its platform, unless it has one; returns `client`."""
    if getattr(client, "_platform", ...) is None:  # an SDK without this attribute is left as it is
        platform = _platform(sdk)
        if platform is not None:
            client._platform = platform
    return client
