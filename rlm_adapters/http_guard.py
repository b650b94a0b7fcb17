"""Who may reach a local HTTP server of ours (`rlm-mcp --http`, `rlm serve`): loopback, Host, Origin, bearer.

Standard library only, so that both servers share one check without one importing the other's package:

- `is_loopback`: a bind address that only this machine reaches. Off loopback, a server needs a token.
- `host_allowed`: on loopback, the ``Host`` header must name a loopback address (any port). A web page
  that re-points its own domain at 127.0.0.1 (DNS rebinding) sends its domain as the Host, and is refused.
  These are the hosts the MCP SDK's ``TransportSecuritySettings`` allows on loopback.
- `origin_allowed`: a browser sends ``Origin`` with every cross-site request; only a page served from a
  loopback address may call (no Origin at all is a program, not a page). The SDK's allowed origins too.
- `bearer_matches`: ``Authorization: Bearer <token>``, compared in constant time.
"""

from __future__ import annotations

import hmac
import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (``localhost``, ``127.0.0.0/8``, ``::1``); a name is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_part(value: str) -> str | None:
    """The host of a ``Host`` header value (``127.0.0.1:8000`` -> ``127.0.0.1``, ``[::1]:80`` -> ``[::1]``)."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not value[end + 1 :].startswith(":")):
            return None
        host, port = value[: end + 1], value[end + 2 :]
    else:
        host, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return host


def host_allowed(value: str | None) -> bool:
    """Whether a ``Host`` header names a loopback address (any port), as a loopback server requires."""
    if not value:
        return False
    return _host_part(value.lower()) in LOOPBACK_NAMES


def origin_allowed(value: str | None) -> bool:
    """Whether an ``Origin`` header is absent (not a browser) or a page served from a loopback address."""
    if value is None:
        return True
    try:
        parts = urlsplit(value.lower())
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or parts.path or parts.query or parts.fragment:
        return False
    return host_allowed(parts.netloc)


def bearer_matches(header: bytes | None, token: str) -> bool:
    """Whether an ``Authorization`` header is ``Bearer <token>`` (constant-time comparison)."""
    return hmac.compare_digest(header or b"", f"Bearer {token}".encode())


__all__ = ["bearer_matches", "host_allowed", "is_loopback", "origin_allowed"]
