"""Bedrock's HTTP replies read under a deadline and a size cap, from botocore's ``before-send`` event.

botocore reads a whole reply before it returns (``AWSResponse.content``), each socket read bounded by its
``read_timeout`` alone: a server trickling a byte at a time holds the thread for ever, and an 800 MiB body is
read whole. A ``before-send`` handler may answer a request itself (botocore then sends nothing), so
`BoundedSender` sends it through botocore's own HTTP session (the client's proxies, TLS settings and
connection pool) with ``stream_output`` set, so that the session leaves the body unread, and reads the body in
chunks: each read waits no longer than the time left before the attempt's end, and reading stops once the
body passes ``max_reply_bytes`` (`ReplyTooLarge`) or that time is up (`TimeoutError`).

The session is botocore's ``client._endpoint.http_session``; were a botocore release to move it, the handler
steps aside and botocore sends as before (the asyncio timeout still bounds the call, not the thread).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from rlm_adapters.core.lm._http import ReplyTooLarge

CHUNK = 64 * 1024
EVENT = "before-send.bedrock-runtime"


class _Body:
    """What botocore reads an `AWSResponse` from: the body already read."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_kwargs: Any) -> Iterator[bytes]:
        yield self._body


class BoundedSender:
    """Sends a boto3 client's requests and reads their replies under a deadline and `limit` bytes.

    Args:
        limit: The most bytes a reply may hold.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._local = threading.local()  # the end of the call this thread is making
        self._session: Any = None

    def attach(self, client: Any) -> None:
        """Answer `client`'s Bedrock Runtime requests (``before-send``) from now on."""
        self._session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        client.meta.events.register(EVENT, self._send)

    @contextlib.contextmanager
    def until(self, ends: float) -> Iterator[None]:
        """Bound the requests this thread sends inside to end by `ends` (a `time.monotonic()` instant)."""
        self._local.ends = ends
        try:
            yield
        finally:
            self._local.ends = None

    def _send(self, request: Any, **_kwargs: Any) -> Any:
        if self._session is None or not hasattr(request, "stream_output"):
            return None  # botocore sends it itself
        from botocore.awsrequest import AWSResponse  # type: ignore[import-untyped]

        ends: float | None = getattr(self._local, "ends", None)
        context = getattr(request, "context", None)
        if ends is not None and isinstance(context, dict):
            context["read_timeout"] = max(0.001, ends - time.monotonic())  # no single read past the end
        request.stream_output = True  # the session returns at the headers; the body is read below
        response = self._session.send(request)
        body = self._read(response.raw, ends)
        return AWSResponse(response.url, response.status_code, response.headers, _Body(body))

    def _read(self, raw: Any, ends: float | None) -> bytes:
        declared = str(raw.headers.get("content-length", "")).strip()
        try:
            if declared.isdigit() and int(declared) > self.limit:
                raise ReplyTooLarge(self.limit, declared=int(declared))
            chunks: list[bytes] = []
            size = 0
            while True:
                if ends is not None:
                    left = ends - time.monotonic()
                    if left <= 0:
                        raise TimeoutError("the reply did not arrive whole before the request's deadline")
                    sock = _socket_of(raw)
                    if sock is not None:
                        sock.settimeout(left)
                chunk = raw.read1(CHUNK) if hasattr(raw, "read1") else raw.read(CHUNK)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > self.limit:
                    raise ReplyTooLarge(self.limit)
                chunks.append(chunk)
        except BaseException:
            raw.close()  # the connection is not reused half-read
            raise


def _socket_of(raw: Any) -> socket.socket | None:
    """The socket under a urllib3 response, when it shows it (the read timeout is set on it)."""
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    return sock if isinstance(sock, socket.socket) else None
