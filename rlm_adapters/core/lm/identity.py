"""What, besides the messages, decides a model's reply: the identity a call cache keys on.

A client says it with ``cache_identity()``: its backend, endpoint, model and every request setting it
sends (sampling, reply caps, tools, response formats). What never decides a reply stays out, so that a new
key, a longer timeout or a trace header keeps the cache valid, and no credential is ever part of what is
hashed: keys, tokens, secrets, passwords, headers, HTTP clients, timeouts and retry counts. A client
without the method (a user's own `LMClient`) is known by its class, model name and endpoint.
"""

from __future__ import annotations

import enum
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

# Settings that shape the transport or carry credentials, never the reply.
TRANSPORT_KEYS = frozenset(
    {
        "timeout",
        "max_retries",
        "num_retries",
        "http_client",
        "default_headers",
        "extra_headers",
        "headers",
        "organization",
        "project",
        "max_workers",
        "max_reply_bytes",
        "profile_name",
        "credentials",
        "azure_ad_token_provider",
    }
)
# Names that hold a secret however they are spelt (``api_key``, ``aws_secret_access_key``, ``x-api-key``,
# ``azure_ad_token``, ``session_token``), but not the settings that merely mention tokens (``max_tokens``).
_SECRET = re.compile(
    r"(key|secret|password|passwd|credential|authorization|cookie|bearer)|(^|[_\-])token$", re.IGNORECASE
)
# Names that contain "key" and decide the reply.
_NOT_SECRET = frozenset({"top_k", "response_format", "logit_bias", "stop_sequences", "prompt_cache_key"})


def is_secret_name(name: str) -> bool:
    """True for a setting's name that holds a credential (or a header, or transport detail)."""
    if name in _NOT_SECRET:
        return False
    return name in TRANSPORT_KEYS or bool(_SECRET.search(name))


def scrub(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON data without credentials: secret-named keys dropped at every level; objects
    other than JSON values by their type's name (a repr may hold a memory address, which changes per process).
    """
    if depth > 20:
        return "..."
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return scrub(value.value, depth + 1)
    if isinstance(value, Mapping):
        return {str(k): scrub(v, depth + 1) for k, v in value.items() if not (isinstance(k, str) and is_secret_name(k))}
    if isinstance(value, list | tuple):
        return [scrub(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((scrub(v, depth + 1) for v in value), key=repr)
    dump = getattr(value, "model_dump", None)  # a pydantic model (a response format, a tool spec)
    if callable(dump) and not isinstance(value, type):
        try:
            return scrub(dump(), depth + 1)
        except Exception:  # a model that cannot dump itself is known by its type
            pass
    kind = value if isinstance(value, type) else type(value)
    return f"<{kind.__module__}.{kind.__qualname__}>"


def public_endpoint(endpoint: str | None) -> str | None:
    """An endpoint URL without what may carry a credential (``user:pass@``, the query string)."""
    if not endpoint:
        return endpoint
    try:
        parts = urllib.parse.urlsplit(endpoint)
    except ValueError:
        return endpoint
    if not parts.scheme or not parts.netloc:
        return endpoint
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def request_identity(backend: str, endpoint: str | None, model: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a client's requests: backend, endpoint, model and its request settings, scrubbed.

    Args:
        backend: The backend's name (``openai``, ``anthropic``, ...).
        endpoint: Where requests go (a base URL, a region).
        model: The model called.
        settings: What goes with every request besides the messages.
    """
    return {"backend": backend, "endpoint": public_endpoint(endpoint), "model": model, "settings": scrub(settings)}


def wrapped_identity(backend: str, model: str, wrapped: object, describe: Callable[[], Any]) -> dict[str, Any]:
    """The identity of a client around another library's model object: the object's type and its own account
    of its settings (`describe`; None when it cannot give one), scrubbed by `client_identity`."""
    try:
        settings = describe()
    except Exception:  # an object that cannot describe itself is known by its type and name
        settings = None
    kind = type(wrapped)
    return {
        "backend": backend,
        "model": model,
        "object": f"{kind.__module__}.{kind.__qualname__}",
        "settings": settings,
    }


def client_identity(client: object) -> dict[str, Any]:
    """The identity of `client`'s requests: its ``cache_identity()``, else its class, model and endpoint."""
    method = getattr(client, "cache_identity", None)
    if callable(method):
        identity = method()
        if isinstance(identity, Mapping):
            return dict(scrub(identity))
    kind = type(client)
    endpoint = getattr(client, "endpoint", None)
    return {
        "client": f"{kind.__module__}.{kind.__qualname__}",
        "model": str(getattr(client, "model_name", "")),
        "endpoint": public_endpoint(endpoint) if isinstance(endpoint, str) else None,
    }
