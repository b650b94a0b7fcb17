"""What, besides the messages, decides a model's reply: the identity a call cache keys on.

A client says it with ``cache_identity()``: its backend, endpoint, model and every setting it sends (sampling,
reply caps, tools, response formats, headers, the endpoint's query string). Every one of them is hashed, at
any depth, whatever its name (a schema property ``keywords`` or a tool parameter ``primary_key`` decides the
reply as much as ``temperature`` does). Two kinds of setting are left out, and only by their exact names at the
client-settings level (and for headers and query parameters, by their exact names there):

- credentials (``api_key``, ``aws_secret_access_key``, an ``Authorization`` header, a ``?key=`` parameter,
  the URL's ``user:password@``): a rotated key keeps the cache valid (see `CREDENTIALS` for why a new key is
  not a new identity);
- transport (timeouts, retry counts, HTTP clients, reply byte caps), which never shape a reply.

Every header and query value, and any value whose name looks secret (a ``password`` nested in ``extra_body``),
is still hashed, as its SHA-256 digest: it may choose where a request goes (``x-portkey-virtual-key``), so it
is part of the key, and the identity never holds it in clear (only a digest of the whole identity reaches a
cache file anyway). A client without
the method (a user's own `LMClient`) is known by its class, model name and endpoint.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from rlm_adapters.core.lm.base import LMClient, declared

# Settings that shape the transport, never the reply.
TRANSPORT_KEYS = frozenset(
    {
        "timeout",
        "max_retries",
        "num_retries",
        "http_client",
        "max_workers",
        "max_reply_bytes",
        "azure_ad_token_provider",
    }
)
# Credentials, by their exact names among a client's settings. Left out of the identity, not digested: the
# cache belongs to one user (its file is 0600 and refused otherwise), who holds every key it was filled with,
# and the reply was the model's answer to the very same request at the same endpoint; a key rotated between a
# run and its resume must not make the resume pay again for every call. Where a credential also routes (a
# gateway's virtual key), it travels in a header or setting of its own, which is hashed (digested).
CREDENTIALS = frozenset(
    {
        "api_key",
        "portkey_api_key",
        "provider_api_key",
        "azure_ad_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "aws_bearer_token_bedrock",
        "credentials",
        "profile_name",
        "organization",
        "project",
        "vertex_credentials",
    }
)
# The same credentials as headers and query parameters (compared in lower case).
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "x-portkey-api-key", "cookie"}
)
CREDENTIAL_QUERY = frozenset({"key", "api-key", "api_key", "apikey", "access_token", "token", "sig", "code"})
# Settings holding a URL: hashed as `endpoint_identity` makes it (its password left out).
_ENDPOINTS = frozenset({"base_url", "api_base", "azure_endpoint", "endpoint_url", "websocket_base_url"})
# Settings holding headers or query parameters: hashed name by name, by `_pairs`.
_PAIRS = frozenset({"default_headers", "extra_headers", "headers", "default_query", "extra_query"})
# Names that hold a secret however they are spelt (``api_key``, ``aws_secret_access_key``, ``x-api-key``,
# ``azure_ad_token``, ``session_token``), but not the settings that merely mention tokens (``max_tokens``).
_SECRET = re.compile(
    r"(key|secret|password|passwd|credential|authorization|cookie|bearer)|(^|[_\-])token$", re.IGNORECASE
)
# Names that contain "key" and are plain settings (kept as they are, not digested).
_NOT_SECRET = frozenset({"top_k", "response_format", "logit_bias", "stop_sequences", "prompt_cache_key"})


def is_secret_name(name: str) -> bool:
    """True for a name whose value may be a secret: the value is hashed as a digest, never kept in clear."""
    if name in _NOT_SECRET:
        return False
    return name in CREDENTIALS or bool(_SECRET.search(name))


def digest(value: Any) -> str:
    """A value that may be secret, as ``sha256:`` and the digest of its canonical JSON."""
    data = json.dumps(scrub(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return "sha256:" + hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


def scrub(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON data with nothing secret in clear: secret-named values digested at every level;
    objects other than JSON values by their type's name (a repr may hold a memory address, which changes per
    process). Nothing is dropped: a name that merely looks secret (``keywords``) still decides the reply.
    """
    if depth > 20:
        return "..."
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return scrub(value.value, depth + 1)
    if isinstance(value, Mapping):
        return {
            str(k): digest(v) if isinstance(k, str) and is_secret_name(k) else scrub(v, depth + 1)
            for k, v in value.items()
        }
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


def settings_identity(settings: Any) -> Any:
    """A client's settings as they decide a reply: credentials and transport left out by their exact names,
    headers and query parameters hashed name by name, everything else `scrub`bed."""
    if not isinstance(settings, Mapping):
        return scrub(settings)
    kept: dict[str, Any] = {}
    for name, value in settings.items():
        if not isinstance(name, str):
            kept[str(name)] = scrub(value)
        elif name in CREDENTIALS or name in TRANSPORT_KEYS:
            continue
        elif name in _ENDPOINTS and isinstance(value, str):
            kept[name] = endpoint_identity(value)
        elif name in _PAIRS and isinstance(value, Mapping):
            exact = CREDENTIAL_QUERY if name.endswith("_query") else CREDENTIAL_HEADERS
            if pairs := _pairs(value.items(), exact):  # only credentials: as if none were given
                kept[name] = pairs
        else:
            kept[name] = digest(value) if is_secret_name(name) else scrub(value)
    return kept


def _pairs(pairs: Any, credentials: frozenset[str]) -> list[list[str]]:
    """Headers or query parameters in a stable order (names in lower case, as servers read them): credentials
    left out, every value as its digest (whether a header holds a secret cannot be told from its name)."""
    kept = [[str(name).lower(), digest(value)] for name, value in pairs if str(name).lower() not in credentials]
    return sorted(kept)


def public_endpoint(endpoint: str | None) -> str | None:
    """An endpoint URL without what may carry a credential (``user:pass@``, the query string), for display."""
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


def endpoint_identity(endpoint: str | None) -> Any:
    """An endpoint as it decides a reply: scheme, host and path, and its query parameters, values digested
    (``?api-version=`` chooses an API; a credential such as ``?key=`` is left out). The URL's ``user:password@``
    is a credential and is left out."""
    public = public_endpoint(endpoint)
    if not endpoint or public == endpoint:
        return public
    try:
        query = urllib.parse.parse_qsl(urllib.parse.urlsplit(endpoint).query, keep_blank_values=True)
    except ValueError:
        return public
    pairs = _pairs(query, CREDENTIAL_QUERY)
    return {"url": public, "query": pairs} if pairs else public


def request_identity(backend: str, endpoint: str | None, model: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The identity of a client's requests: backend, endpoint, model and its settings, credentials left out.

    Args:
        backend: The backend's name (``openai``, ``anthropic``, ...).
        endpoint: Where requests go (a base URL, a region), query string and all.
        model: The model called.
        settings: Every setting of the client and of its requests besides the messages (credentials,
            transport and headers included: `settings_identity` chooses what of them is hashed).
    """
    return {
        "backend": backend,
        "endpoint": endpoint_identity(endpoint),
        "model": model,
        "settings": settings_identity(settings),
    }


def wrapped_identity(backend: str, model: str, wrapped: object, describe: Callable[[], Any]) -> dict[str, Any]:
    """The identity of a client around another library's model object: the object's type and its own account
    of its settings (`describe`; None when it cannot give one), credentials left out as `settings_identity` does."""
    try:
        settings = describe()
    except Exception:  # an object that cannot describe itself is known by its type and name
        settings = None
    kind = type(wrapped)
    return {
        "backend": backend,
        "model": model,
        "object": f"{kind.__module__}.{kind.__qualname__}",
        "settings": settings_identity(settings),
    }


def client_identity(client: LMClient) -> dict[str, Any]:
    """The identity of `client`'s requests: its ``cache_identity()``, else its class, model and endpoint."""
    model = declared(client)
    identity = model.cache_identity()
    if identity is not None:
        return dict(scrub(identity))
    kind = type(model.implementation)
    return {
        "client": f"{kind.__module__}.{kind.__qualname__}",
        "model": model.model_name,
        "endpoint": endpoint_identity(model.endpoint) if model.endpoint is not None else None,
    }
