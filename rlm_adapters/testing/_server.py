"""The HTTP plumbing shared by the local fake model servers (one module per provider wire format).

A `FakeModelServer` is a real HTTP/1.1 server on 127.0.0.1 in a background thread. It owns what every
wire format shares: scripted root replies (a request whose system message is the RLM's is a *root*
request, answered by turn), a leaf policy for every other request, latency, injected faults and counters.
Faults: HTTP errors (a 429 with any ``Retry-After``), hangs, bodies that are not JSON, a reply trickled a few
bytes at a time, an oversized reply streamed without being held in memory (optionally chunked or gzipped),
a reply whose JSON is reshaped (content parts, nulls, odd usage), and a reply whose message content is
replaced. A subclass parses its provider's request into plain ``{"role", "content"}`` messages, calls
`answer`, and renders the reply or the error in its wire format (and says where its content lives).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Self

RootPolicy = Callable[[list[dict[str, Any]]], str]
LeafPolicy = Callable[[str], str]
ROOT_MARKER = "stored in a Python REPL as the variable `context`"
_NUMBER = re.compile(r"magic number[^0-9]{0,40}?(\d{3,})", re.IGNORECASE)


def default_leaf(prompt: str) -> str:
    """Answers from the prompt: the magic number it holds, else ``NONE``."""
    match = _NUMBER.search(prompt)
    return match.group(1) if match else "NONE"


def turn_of(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many assistant replies a conversation already has (0 for its first turn)."""
    return sum(1 for m in messages if m.get("role") == "assistant")


def scripted_root(replies: Sequence[str]) -> Callable[[Sequence[Mapping[str, Any]]], str]:
    """A root policy playing `replies` by turn (the last one repeats); also a `ScriptedModel`'s function."""
    items = list(replies)

    def policy(messages: Sequence[Mapping[str, Any]]) -> str:
        return items[min(turn_of(messages), len(items) - 1)]

    return policy


# Where an oversized reply's text goes in the rendered JSON (a control character no reply holds).
HUGE_MARK = "\u0000rlm-huge-reply\u0000"
_HUGE_MARK_JSON = json.dumps(HUGE_MARK)[1:-1].encode()
_STREAM_CHUNK = 1 << 20


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
_delivery: ContextVar[Fault | None] = ContextVar("fake_server_delivery", default=None)


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
    bytes_sent: int = 0  # body bytes of trickled and oversized replies written so far
    cut_off: int = 0  # trickled or oversized replies the client hung up on before their last byte
    by_model: Counter[str] = field(default_factory=Counter)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


@dataclass(frozen=True)
class Answer:
    """A reply `FakeModelServer.answer` produced, for the subclass to render in its wire format."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    number: int


# status, JSON payload (or None), raw body (or None), extra headers
Response = tuple[int, Any, bytes | None, dict[str, str]]


class FakeModelServer:
    """A fake model server on 127.0.0.1 in a background thread; subclasses speak one provider's wire format.

    Args:
        root: Root replies by turn, or a function of the messages.
        leaf: Answers non-root requests from their last user message.
        latency: Seconds every request waits before its answer.
        root_latency: Overrides `latency` for root requests.
        max_in_flight: Like a provider's concurrency limit: a request arriving while this many are in
            flight is refused at once with HTTP 429 (None: no limit).
        retry_after: The ``Retry-After`` seconds sent with a 429.
        port: 0 picks a free port.
    """

    def __init__(
        self,
        root: RootPolicy | Sequence[str] | None = None,
        leaf: LeafPolicy | None = None,
        *,
        latency: float = 0.0,
        root_latency: float | None = None,
        max_in_flight: int | None = None,
        retry_after: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if root is None:
            root = ["```repl\nprint(len(context))\n```", "FINAL(done)"]
        self.root: RootPolicy = root if callable(root) else scripted_root(root)
        self.leaf: LeafPolicy = leaf or default_leaf
        self.latency = latency
        self.root_latency = root_latency
        self.max_in_flight = max_in_flight
        self.retry_after = retry_after
        self.host = host
        self.port = port
        self.counters = ServerCounters()
        self.requests_log: list[dict[str, Any]] = []
        self.headers_log: list[dict[str, str]] = []
        self.keep_requests = True
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._cut = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    @property
    def root(self) -> RootPolicy:
        """The root policy; assign a function of the messages or a list of replies by turn."""
        return self._root

    @root.setter
    def root(self, value: RootPolicy | Sequence[str]) -> None:
        self._root = value if callable(value) else scripted_root(value)

    # -- lifecycle --------------------------------------------------------------------------------
    wire = "model"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        """Start serving (returns when the port is bound)."""
        self._thread = threading.Thread(target=self._serve, name=f"fake-{self.wire}", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise RuntimeError(f"the fake {self.wire} server could not start: {self._startup_error}")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_cut_off(self, count: int = 1, timeout: float = 10.0) -> bool:
        """Wait until the client hung up on `count` trickled or oversized replies; False after `timeout` s."""
        with self._cut:
            return self._cut.wait_for(lambda: self.counters.cut_off >= count, timeout)

    def reset_counters(self) -> None:
        """Zero the counters and forget logged requests."""
        with self._lock:
            self.counters = ServerCounters()
            self.requests_log.clear()
            self.headers_log.clear()

    # -- faults -----------------------------------------------------------------------------------
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

    # -- serving ----------------------------------------------------------------------------------
    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            self._server = loop.run_until_complete(asyncio.start_server(self._connection, self.host, self.port))
            self.port = self._server.sockets[0].getsockname()[1]
        except OSError as exc:
            self._startup_error = exc
            loop.close()  # here, not in a garbage collection at exit that may find its parts gone
            self._ready.set()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                method, path, headers_in, body = request
                if self.keep_requests:
                    with self._lock:
                        self.headers_log.append({"method": method, "path": path, **headers_in})
                _delivery.set(None)
                status, payload, raw, headers = await self.route(method, path, body)
                fault = _delivery.get()
                if fault is None:
                    _write_response(writer, status, payload, raw, headers)
                    await writer.drain()
                elif not await self._deliver(writer, status, payload, headers, fault):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping with keep-alive connections open
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _deliver(
        self, writer: asyncio.StreamWriter, status: int, payload: Any, headers: dict[str, str], fault: Fault
    ) -> bool:
        """Write a reply as a delivery fault says; False when the client hung up before its last byte."""
        if fault.kind == "reshape" and fault.reshape is not None:
            shaped = fault.reshape(payload)
            raw = shaped if isinstance(shaped, bytes) else json.dumps(shaped).encode()
            _write_response(writer, status, None, raw, headers)
            await writer.drain()
            return True
        body = json.dumps(payload).encode()
        try:
            if fault.kind == "trickle":
                writer.write(_head(status, len(body), headers))
                for start in range(0, len(body), max(1, fault.chunk)):
                    await asyncio.sleep(fault.interval)
                    piece = body[start : start + max(1, fault.chunk)]
                    writer.write(piece)
                    await writer.drain()
                    self.counters.bytes_sent += len(piece)
                return True
            await self._stream_huge(writer, status, body, headers, fault)
            return True
        except (ConnectionError, OSError):
            with self._cut:
                self.counters.cut_off += 1
                self._cut.notify_all()
            return False

    async def _stream_huge(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str], fault: Fault
    ) -> None:
        prefix, _, suffix = body.partition(_HUGE_MARK_JSON)
        compressor = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16) if fault.gzip else None

        def pieces() -> Any:
            yield prefix
            block = b"x" * _STREAM_CHUNK
            left = fault.size
            while left > 0:
                yield block[: min(left, _STREAM_CHUNK)]
                left -= _STREAM_CHUNK
            yield suffix

        extra = {**headers, **({"content-encoding": "gzip"} if fault.gzip else {})}
        if fault.chunked or fault.gzip:
            writer.write(_head(status, None, extra))
        else:
            writer.write(_head(status, len(prefix) + fault.size + len(suffix), extra))
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
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if framed else data)
        await writer.drain()
        self.counters.bytes_sent += len(data)

    # -- what subclasses use ------------------------------------------------------------------------
    async def route(self, method: str, path: str, body: bytes) -> Response:
        """Answer one HTTP request (the subclass's wire format)."""
        raise NotImplementedError

    def error(self, status: int, message: str) -> Response:
        """An HTTP error in the subclass's wire format."""
        raise NotImplementedError

    def _too_many(self, message: str, retry_after: str | None) -> Response:
        status, payload, raw, headers = self.error(429, message)
        return status, payload, raw, {"retry-after": retry_after or f"{self.retry_after:g}", **headers}

    async def answer(
        self, model: str, messages: list[dict[str, Any]], options: dict[str, Any] | None = None
    ) -> Answer | Response:
        """Serve one model request given as plain ``{"role", "content"}`` messages (system first); `options`
        are the request's other fields, kept in `requests_log`.

        Returns:
            The reply to render, or, for an injected fault, the finished error response.
        """
        is_root = (
            bool(messages)
            and messages[0].get("role") == "system"
            and ROOT_MARKER in text_of(messages[0].get("content"))
        )
        with self._lock:
            self.counters.requests += 1
            if self.max_in_flight is not None and self.counters.in_flight >= self.max_in_flight:
                self.counters.rate_limited += 1
                return self._too_many(f"more than {self.max_in_flight} requests in flight", None)
            fault = self._faults.pop(0) if self._faults else None
            self.counters.in_flight += 1
            self.counters.peak_in_flight = max(self.counters.peak_in_flight, self.counters.in_flight)
            if self.keep_requests:
                entry = {"model": model, "messages": messages, "root": is_root, "options": dict(options or {})}
                self.requests_log.append(entry)
        try:
            if fault is not None and fault.kind in ("trickle", "huge", "reshape"):
                self.counters.faults_served += 1
                _delivery.set(fault)  # answered as usual, delivered as the fault says
                fault = None
            if fault is not None:
                self.counters.faults_served += 1
                if fault.kind == "hang":
                    await asyncio.Event().wait()
                if fault.kind == "garbage":
                    return 200, None, fault.body, {}
                if fault.status == 429:
                    return self._too_many(fault.message, fault.retry_after)
                return self.error(fault.status, fault.message)
            latency = self.root_latency if (is_root and self.root_latency is not None) else self.latency
            if latency:
                await asyncio.sleep(latency)
            if is_root:
                reply = self.root(messages)
            else:
                last = next((m for m in reversed(messages) if m.get("role") == "user"), {"content": ""})
                reply = self.leaf(text_of(last.get("content")))
            delivery = _delivery.get()
            if delivery is not None and delivery.kind == "huge":
                reply = HUGE_MARK
            prompt_tokens = sum(_tokens(text_of(m.get("content"))) for m in messages)
            completion_tokens = _tokens(reply)
            with self._lock:
                self.counters.root_requests += is_root
                self.counters.leaf_requests += not is_root
                self.counters.prompt_tokens += prompt_tokens
                self.counters.completion_tokens += completion_tokens
                self.counters.by_model[model] += 1
            return Answer(reply, model, prompt_tokens, completion_tokens, next(self._ids))
        finally:
            with self._lock:
                self.counters.in_flight -= 1


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or OpenAI-style content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str], bytes] | None:
    """One HTTP/1.1 request (Content-Length bodies only; header names lowercased), or None when the client closed."""
    line = await reader.readline()
    if not line:
        return None
    try:
        method, path, _version = line.decode("latin-1").split(" ", 2)
    except ValueError:
        return None
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return method, path, headers, body


def _head(status: int, length: int | None, headers: dict[str, str]) -> bytes:
    """A response's status line and headers; no `length`: the body is sent chunked."""
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}.get(status, "Error")
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    framing = "transfer-encoding: chunked" if length is None else f"content-length: {length}"
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{framing}\r\n"
        f"{extra}connection: keep-alive\r\n\r\n"
    )
    return head.encode("latin-1")


def _write_response(
    writer: asyncio.StreamWriter, status: int, payload: Any, raw: bytes | None, headers: dict[str, str]
) -> None:
    body = raw if raw is not None else json.dumps(payload).encode("utf-8")
    writer.write(_head(status, len(body), headers) + body)
