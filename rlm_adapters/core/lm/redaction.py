"""What a client of ours may see of a model endpoint and of a provider's error: no credential in it.

An endpoint URL can carry credentials (``https://user:password@host/v1``, ``?api-key=...``, ``?sig=...``), and a
provider's error often quotes what it was sent: the URL, the query string, the ``Authorization`` header (a
URL's ``user:password`` travels as HTTP Basic). Every text a client of ours shows from a failed call (`rlm
serve`'s error bodies and stream events, MCP tool errors, ``rlm ask``'s stderr, ``result.error``, trajectories,
ChatRLM's exceptions, the REPL's ``Error: ...`` that the root model reads and may repeat) passes through
`redact`, which

- drops a URL's ``user:password@``, as `identity.public_endpoint` does for an endpoint shown on its own;
- writes ``***`` for the value of a query parameter named like a credential (``key``, ``api-key``, ``token``,
  ``sig``, ...: `identity.CREDENTIAL_QUERY`, or any name `identity.is_secret_name` calls secret), wherever a
  ``?name=`` or ``&name=`` appears;
- writes ``***`` for each exact secret the caller knows (`endpoint_secrets`: the endpoint's password and
  credential query values, as written, percent-encoded and as HTTP Basic; the API key), wherever it appears,
  so that an upstream echoing a bare key is caught too.

A secret shorter than `MIN_SECRET_CHARS` is not searched for as bare text (every ``a`` of a message would go):
the URL-shaped rules still remove it from URLs.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Iterable

from rlm_adapters.core.lm.reply_identity import CREDENTIAL_QUERY, is_secret_name

MASK = "***"
MIN_SECRET_CHARS = 4
# A URL's authority up to its last "@": what quotes, brackets, blanks and path characters cannot be part of.
# A JSON writer may escape the slashes (``http:\/\/``). Both runs are bounded (a scheme is short, userinfo
# rarely long): unbounded, a provider's error of ``a.a.a.a...`` would take time quadratic in its length, on
# the event loop.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]{0,31}:(?:\\?/){2})[^\s/?#\"'<>\\`]{0,2048}@")
# ``?name=value`` / ``&name=value`` / ``;name=value``: the value runs to the next separator, quote or blank
# (a match consumes it, and a name is at most 64 characters: linear in the text).
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<name>[A-Za-z0-9_.~%\-]{1,64})=(?P<value>[^&#;\s\"'<>\\`]*)")


def _secret_parameter(name: str) -> bool:
    plain = urllib.parse.unquote(name)
    return plain.lower() in CREDENTIAL_QUERY or is_secret_name(plain)


def _mask_pair(match: re.Match[str]) -> str:
    if not match["value"] or not _secret_parameter(match["name"]):
        return match[0]
    return f"{match['lead']}{match['name']}={MASK}"


def endpoint_secrets(endpoint: str | None) -> tuple[str, ...]:
    """The credentials an endpoint URL carries, in every spelling a server may echo them: its password (or a
    user name given alone), as written and decoded, the HTTP Basic ``user:password`` an SDK sends from it, and
    the values of its credential query parameters."""
    if not endpoint:
        return ()
    try:
        parts = urllib.parse.urlsplit(endpoint)
    except ValueError:
        return ()
    found: list[str] = []
    userinfo, at, _host = parts.netloc.rpartition("@")
    if at:
        user, _, password = userinfo.partition(":")
        plain = urllib.parse.unquote(user), urllib.parse.unquote(password)
        # A user name alone is a credential (``https://KEY@host``); beside a password it is a name, which
        # would mask every ``admin`` or ``user`` of a message.
        found += [password, plain[1]] if password else [user, plain[0]]
        found.append(base64.b64encode(":".join(plain).encode("utf-8", "surrogatepass")).decode())
    for pair in re.split("[&;]", parts.query):
        name, _, raw = pair.partition("=")
        if _secret_parameter(name):
            found += [raw, urllib.parse.unquote_plus(raw)]
    return tuple(dict.fromkeys(s for s in found if s))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without the credentials in the URLs it quotes, nor any of the exact `secrets`.

    Args:
        text: An error message, a body a server answered, anything a client is about to be shown.
        secrets: Exact values to mask wherever they appear (also percent-encoded), e.g. `endpoint_secrets`'
            and an API key; those shorter than `MIN_SECRET_CHARS` are left to the URL rules.
    """
    for secret in sorted({s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_CHARS}, key=len)[::-1]:
        for spelling in dict.fromkeys((secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret))):
            text = text.replace(spelling, MASK)
    text = _USERINFO.sub(lambda m: m["scheme"], text)
    return _QUERY_PAIR.sub(_mask_pair, text)


__all__ = ["MASK", "endpoint_secrets", "redact"]
