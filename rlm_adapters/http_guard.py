"""Who may reach a local HTTP server of ours (`rlm-mcp --http`, `rlm serve`): loopback, Host, Origin, bearer.

The standard library and our errors only, so that both servers share one check without one importing the
other's package:

- `is_loopback`: a bind address that only this machine reaches. Off loopback, a server needs a token.
- `host_allowed`: on loopback, the ``Host`` header must name a loopback address (any port). A web page
  that re-points its own domain at 127.0.0.1 (DNS rebinding) sends its domain as the Host, and is refused.
  These are the hosts the MCP SDK's ``TransportSecuritySettings`` allows on loopback.
- `origin_allowed`: a browser sends ``Origin`` with every cross-site request; only a page served from a
  loopback address may call (no Origin at all is a program, not a page). The SDK's allowed origins too.
- `bearer_matches`: ``Authorization: Bearer <token>``, compared in constant time; `BearerToken`, the ASGI
  middleware both servers put it in, each refusing in its own protocol's shape.
- `server_token`: where the token comes from. Not the command line: every local user reads a process's
  arguments (``/proc/PID/cmdline``, ``ps``), and for `rlm-mcp` the token is the principal that owns its runs.
  A file (``--token-file``, read once at start: a regular file of this user's that no one else may read or
  write, as ``ssh`` asks of a key) or a variable (``/proc/PID/environ`` is this user's alone); ``--token``
  still works, with one warning line (`TokenNames.flag_warning`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rlm_adapters.errors import ConfigurationError

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


# ASGI's shapes, as Starlette and the MCP SDK type them (this module imports neither).
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# Writes a protocol's own 401; `presented`: the request carried an Authorization header (a wrong one).
Refusal = Callable[[Send, bool], Awaitable[None]]


class KeyLookupFailed(Exception):
    """The keys' store could not say whether a key is valid (the request is answered 503, not 401)."""


@dataclass(frozen=True)
class BearerKeys:
    """The keys of a shared store a `BearerToken` also accepts (``rlm keys``: each is its own principal).

    Attributes:
        find: The scope entries of the key a bearer secret is (None: unknown or revoked); raises
            `KeyLookupFailed` when the store cannot say.
        prefix: What every key starts with: another bearer is the server's token (or, `anonymous`, nobody's).
        anonymous: A bearer that is no key passes unchecked, as every request does on a loopback server without
            a token (a key's holder is still its own principal there, and a revoked key is refused).
        unavailable: Writes the protocol's 503 when the store failed (with its one-line reason).
    """

    find: Callable[[str], Awaitable[Mapping[str, Any] | None]]
    prefix: str
    anonymous: bool
    unavailable: Callable[[Send, str], Awaitable[None]]


class BearerToken:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>`` (`rlm serve`'s clients
    send their API key so; `rlm-mcp --http`'s clients their configured header), or one of `keys`.

    The lifespan passes; any other connection (a websocket) is closed unchecked, as neither server serves
    one. A request refused is answered by `refuse`, in its protocol's shape.

    Args:
        app: The app to protect.
        token: The token (compared in constant time); None when only `keys` are accepted.
        refuse: Writes the 401.
        scope_extra: Added to the scope of a request that passed with the token (``rlm-mcp``: the principal the
            token is).
        keys: A store's keys, also accepted (each adds its own scope entries), or None.
    """

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        refuse: Refusal,
        scope_extra: Mapping[str, Any] | None = None,
        keys: BearerKeys | None = None,
    ) -> None:
        self.app = app
        self.token = token
        self.refuse = refuse
        self.scope_extra = dict(scope_extra or {})
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        header = next((value for key, value in scope.get("headers") or [] if key == b"authorization"), None)
        if self.token is not None and bearer_matches(header, self.token):
            await self.app({**scope, **self.scope_extra} if self.scope_extra else scope, receive, send)
            return
        if self.keys is not None:
            secret = (header or b"").decode("latin-1")
            secret = secret[len("Bearer ") :] if secret.startswith("Bearer ") else ""
            if secret.startswith(self.keys.prefix):
                try:
                    found = await self.keys.find(secret)
                except KeyLookupFailed as exc:
                    await self.keys.unavailable(send, str(exc))
                    return
                if found is not None:
                    await self.app({**scope, **found}, receive, send)
                    return
            elif self.keys.anonymous:
                await self.app(scope, receive, send)
                return
        await self.refuse(send, bool(header))


# A bearer token is a line of printable characters; a file this large holds something else.
MAX_TOKEN_FILE_BYTES = 4096


@dataclass(frozen=True)
class TokenNames:
    """How one server names its token's sources (``--token-file`` and ``--token`` are the same for both).

    Attributes:
        prog: The command, for messages (``rlm serve``).
        variable: The variable holding the token (``RLM_SERVE_TOKEN``).
        file_variable: The variable naming a token file (``RLM_SERVE_TOKEN_FILE``).
    """

    prog: str
    variable: str
    file_variable: str

    def flag_warning(self) -> str:
        """The one line printed when the token was given as ``--token``."""
        return (
            f"{self.prog}: --token is in the process list, where every local user can read it; put the token in "
            f"a file only you can read (chmod 600) and pass --token-file FILE, or set {self.variable}"
        )


def read_token_file(path: str, source: str = "--token-file") -> str:
    """The token in the file at `path`, once the file is known to be this user's alone.

    The file opened is the one checked (`os.fstat` of the open file, so a link is followed once and a file
    swapped in between is not read); opened without blocking, so a FIFO or a device is refused, not waited on.

    Raises:
        ConfigurationError: it cannot be read, is not a regular file, is another user's, may be read or
            written by group or others, is empty, too large, or holds more than one word.
    """

    def refuse(why: str) -> ConfigurationError:
        return ConfigurationError(f"{source} {path!r} {why}")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror}); give a file holding the token") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refuse("is not a regular file; put the token in a file of its own (chmod 600)")
        if info.st_uid != os.geteuid():
            raise refuse(f"belongs to another user (uid {info.st_uid}), who may have read or set the token")
        if info.st_mode & 0o077:
            mode = oct(stat.S_IMODE(info.st_mode))
            raise refuse(f"may be read or written by others (mode {mode}): chmod 600 {path}")
        data = os.read(fd, MAX_TOKEN_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_FILE_BYTES:
        raise refuse(f"is over {MAX_TOKEN_FILE_BYTES} bytes, more than a token; it must hold the token alone")
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise refuse("is not UTF-8 text; it must hold the token alone") from None
    if not token:
        raise refuse("is empty; write the token in it")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise refuse("holds more than one word; it must hold the token alone, on one line")
    return token


def server_token(
    names: TokenNames, token: str | None, token_file: str | None, environ: Mapping[str, str]
) -> str | None:
    """The server's bearer token: from ``--token-file`` or ``--token``, else from the file variable or the
    variable (flags win over variables); None when none is given.

    Raises:
        ConfigurationError: two sources at one level (they could disagree), or a token file `read_token_file`
            refuses.
    """
    if token_file and token:
        raise ConfigurationError(f"{names.prog}: --token and --token-file contradict each other: give one")
    if token_file:
        return read_token_file(token_file)
    if token:
        return token
    from_file, from_variable = environ.get(names.file_variable), environ.get(names.variable)
    if from_file and from_variable:
        raise ConfigurationError(
            f"{names.prog}: {names.variable} and {names.file_variable} are both set: unset one of them"
        )
    if from_file:
        return read_token_file(from_file, names.file_variable)
    return from_variable or None


__all__ = [
    "MAX_TOKEN_FILE_BYTES",
    "BearerKeys",
    "BearerToken",
    "KeyLookupFailed",
    "TokenNames",
    "bearer_matches",
    "host_allowed",
    "is_loopback",
    "origin_allowed",
    "read_token_file",
    "server_token",
]
