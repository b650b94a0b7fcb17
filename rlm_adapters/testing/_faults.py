"""What the fake model servers inject and count: faults for the next requests, and the counters.

A status fault (an HTTP error, a 429 with any ``Retry-After``), a hang or a body that is not JSON replaces
the answer; a delivery fault (a reply trickled a few bytes at a time, an oversized reply streamed without
being held in memory, optionally chunked or gzipped, a reply whose JSON is reshaped) is answered as usual
and written as the fault says (`FaultInjection.deliver`). `ServerCounters` is what a server saw.
"""

from __future__ import annotations

import asyncio
import json
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from rlm_adapters.testing._http import head, write_response

# Where an oversized reply's text goes in the rendered JSON (a control character no reply holds).
HUGE_MARK = "\u0000rlm-huge-reply\u0000"
_HUGE_MARK_JSON = json.dumps(HUGE_MARK)[1:-1].encode()
_STREAM_CHUNK = 1 << 20
# The faults a request is answered as usual for, then delivered as the fault says.
DELIVERY_FAULTS = ("trickle", "huge", "reshape")


@dataclass
class Fault:
    """An injected fault for the next request(s)."""

    kind: str  # "status", "hang", "garbage", "trickle", "huge", "reshape"
    status: int = 500
    message: str = "injected failure"
    retry_after: str | None = None  # the Retry-After header of a 429 (None: the server's `retry_after`)
    body: bytes = b"this is not json"  # the body of a "garbage" answer
    interval: float = 0.5  # "trickle": seconds between writes
    chunk: int = 1  # "trickle": bytes per write
    size: int = 0  # "huge": bytes of reply text
    chunked: bool = False  # "huge": Transfer-Encoding chunked, no Content-Length
    gzip: bool = False  # "huge": the body gzip-encoded
    reshape: Callable[[Any], Any] | None = None  # "reshape": rendered payload -> the JSON value sent


# The delivery fault of the request being answered, set by `answer`, read once the reply is rendered.
DELIVERY: ContextVar[Fault | None] = ContextVar("fake_server_delivery", default=None)


@dataclass
class ServerCounters:
    """What the server saw. Reset with `FakeModelServer.reset_counters`."""

    requests: int = 0
    root_requests: int = 0
    leaf_requests: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    faults_served: int = 0
    rate_limited: int = 0  # requests refused with 429 because `max_in_flight` were already in flight
    bytes_sent: int = 0  # body bytes of trickled and oversized replies handed to the socket so far
    cut_off: int = 0  # trickled or oversized replies the client hung up on before their last byte
    by_model: Counter[str] = field(default_factory=Counter)


class FaultInjection:
    """The fault queue of a server and the writing of delivery faults (a part of `FakeModelServer`).

    The server sets the state below in its ``__init__``: the counters, its lock, a condition on that lock
    signalled when a client hangs up mid-reply, and the queue of faults still to serve.
    """

    counters: ServerCounters
    _lock: threading.Lock
    _cut: threading.Condition
    _faults: list[Fault]

    def fail_next(
        self, status: int = 500, count: int = 1, message: str = "injected failure", retry_after: str | None = None
    ) -> None:
        """Answer the next `count` requests with an HTTP error (a 429 carries ``Retry-After``)."""
        with self._lock:
            self._faults += [Fault("status", status, message, retry_after) for _ in range(count)]

    def hang_next(self, count: int = 1) -> None:
        """Never answer the next `count` requests (until the server stops)."""
        with self._lock:
            self._faults += [Fault("hang") for _ in range(count)]

    def garbage_next(self, count: int = 1, body: bytes = b"this is not json") -> None:
        """Answer the next `count` requests with status 200 and `body` (by default not JSON at all)."""
        with self._lock:
            self._faults += [Fault("garbage", body=body) for _ in range(count)]

    def trickle_next(self, count: int = 1, interval: float = 0.5, chunk: int = 1) -> None:
        """Send the next `count` replies `chunk` bytes every `interval` seconds (headers at once, then the body),
        as a slow or hostile server does: no single read waits long, the whole reply takes minutes."""
        with self._lock:
            self._faults += [Fault("trickle", interval=interval, chunk=chunk) for _ in range(count)]

    def huge_next(self, size: int, count: int = 1, *, chunked: bool = False, gzip: bool = False) -> None:
        """Answer the next `count` requests with a valid reply whose text is `size` bytes of ``x``, streamed
        without being held in memory; `chunked` sends no ``Content-Length``, `gzip` compresses the body."""
        with self._lock:
            self._faults += [Fault("huge", size=size, chunked=chunked, gzip=gzip) for _ in range(count)]

    def reshape_next(self, reshape: Callable[[Any], Any], count: int = 1) -> None:
        """Send the next `count` replies as ``reshape(payload)`` (the rendered JSON payload in; any JSON value,
        or bytes sent as they are, out): nulls, missing fields, odd usage, for fuzzing a client."""
        with self._lock:
            self._faults += [Fault("reshape", reshape=reshape) for _ in range(count)]

    def content_next(self, content: Any, count: int = 1) -> None:
        """Send the next `count` replies with their message content replaced by `content` (a number, a list of
        content parts, ...), where this wire format keeps it (`set_content`)."""

        def reshape(payload: Any) -> Any:
            self.set_content(payload, content)
            return payload

        self.reshape_next(reshape, count)

    def set_content(self, payload: Any, content: Any) -> None:
        """Put `content` where this wire format keeps a reply's message content (subclasses)."""
        raise NotImplementedError

    def wait_cut_off(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until the client hung up on `count` trickled or oversized replies; False after `timeout` s."""
        with self._cut:
            return self._cut.wait_for(lambda: self.counters.cut_off >= count, timeout)

    def next_fault(self) -> Fault | None:
        """The fault for the request now arriving, if one is queued (the caller holds the lock)."""
        return self._faults.pop(0) if self._faults else None

    async def deliver(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        payload: Any,
        headers: dict[str, str],
        fault: Fault,
        raw: bytes | None = None,
    ) -> bool:
        """Write a reply as a delivery fault says; False when the client hung up before its last byte.

        A streamed reply (`raw`, an event stream rendered from `payload`) is trickled or swollen as its bytes;
        a reshaped one is rendered again from the reshaped payload by the server's `reshaped_stream`.
        """
        if fault.kind == "reshape" and fault.reshape is not None:
            shaped = fault.reshape(payload)
            if raw is not None and not isinstance(shaped, bytes):
                body = self.reshaped_stream(shaped)
            else:
                body = shaped if isinstance(shaped, bytes) else json.dumps(shaped).encode()
            write_response(writer, status, None, body, headers)
            await writer.drain()
            return True
        body = raw if raw is not None else json.dumps(payload).encode()
        try:
            if fault.kind == "trickle":
                writer.write(head(status, len(body), headers))
                for start in range(0, len(body), max(1, fault.chunk)):
                    await asyncio.sleep(fault.interval)
                    piece = body[start : start + max(1, fault.chunk)]
                    # Counted before the write: the client may read the last byte before drain() returns.
                    self.counters.bytes_sent += len(piece)
                    writer.write(piece)
                    await writer.drain()
                return True
            await self._stream_huge(writer, status, body, headers, fault)
            return True
        except (ConnectionError, OSError):
            with self._cut:
                self.counters.cut_off += 1
                self._cut.notify_all()
            return False

    def reshaped_stream(self, shaped: Any) -> bytes:
        """A reshaped payload as the body of a streamed reply (servers that stream override this)."""
        return json.dumps(shaped).encode()

    async def _stream_huge(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str], fault: Fault
    ) -> None:
        prefix, _, suffix = body.partition(_HUGE_MARK_JSON)
        compressor = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16) if fault.gzip else None

        def pieces() -> Iterator[bytes]:
            yield prefix
            block = b"x" * _STREAM_CHUNK
            left = fault.size
            while left > 0:
                yield block[: min(left, _STREAM_CHUNK)]
                left -= _STREAM_CHUNK
            yield suffix

        extra = {**headers, **({"content-encoding": "gzip"} if fault.gzip else {})}
        if fault.chunked or fault.gzip:
            writer.write(head(status, None, extra))
        else:
            writer.write(head(status, len(prefix) + fault.size + len(suffix), extra))
        for piece in pieces():
            data = compressor.compress(piece) if compressor is not None else piece
            await self._send_piece(writer, data, framed=fault.chunked or fault.gzip)
        if compressor is not None:
            await self._send_piece(writer, compressor.flush(), framed=True)
        if fault.chunked or fault.gzip:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def _send_piece(self, writer: asyncio.StreamWriter, data: bytes, *, framed: bool) -> None:
        if not data:
            return
        self.counters.bytes_sent += len(data)
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if framed else data)
        await writer.drain()
