"""A real, local OpenAI-compatible HTTP server for tests, examples and benchmarks.

It speaks enough of the Chat Completions API for the `openai` SDK (and every client built on it) to
talk to it over a real socket on 127.0.0.1, with:

* scripted root replies: a request whose system message is the RLM's is a *root* request, answered by
  `root` (a list of replies indexed by the conversation's turn, or a function of the messages), so
  concurrent and nested runs each get the right turn;
* a leaf policy for every other request (`leaf(prompt) -> reply`), answering from the prompt's content;
* configurable latency per request, and injected faults (HTTP errors, hangs, invalid JSON);
* counters: requests, root / leaf requests, peak requests in flight, tokens reported.

Start it with ``with FakeOpenAIServer(...) as server:`` and point clients at ``server.base_url``.
Run it stand-alone with ``python -m rlm_adapters.testing.fake_openai --port 8000``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

RootPolicy = Callable[[list[dict[str, Any]]], str]
LeafPolicy = Callable[[str], str]
ROOT_MARKER = "stored in a Python REPL as the variable `context`"
_NUMBER = re.compile(r"magic number[^0-9]{0,40}?(\d{3,})", re.IGNORECASE)


def default_leaf(prompt: str) -> str:
    """Answers from the prompt: the magic number it holds, else ``NONE``."""
    match = _NUMBER.search(prompt)
    return match.group(1) if match else "NONE"


def turn_of(messages: list[dict[str, Any]]) -> int:
    """How many assistant replies a conversation already has (0 for its first turn)."""
    return sum(1 for m in messages if m.get("role") == "assistant")


def scripted_root(replies: Sequence[str]) -> RootPolicy:
    """A root policy playing `replies` by turn (the last one repeats)."""
    items = list(replies)

    def policy(messages: list[dict[str, Any]]) -> str:
        return items[min(turn_of(messages), len(items) - 1)]

    return policy


@dataclass
class Fault:
    """An injected fault for the next request(s)."""

    kind: str  # "status", "hang", "garbage"
    status: int = 500
    message: str = "injected failure"


@dataclass
class ServerCounters:
    """What the server saw. Reset with `FakeOpenAIServer.reset_counters`."""

    requests: int = 0
    root_requests: int = 0
    leaf_requests: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    faults_served: int = 0
    rate_limited: int = 0  # requests refused with 429 because `max_in_flight` were already in flight
    by_model: Counter[str] = field(default_factory=Counter)


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 in a background thread.

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
        self.keep_requests = True
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
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
    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client (``.../v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> FakeOpenAIServer:
        """Start serving (returns when the port is bound)."""
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._startup_error is not None:
            raise RuntimeError(f"the fake OpenAI server could not start: {self._startup_error}")
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reset_counters(self) -> None:
        """Zero the counters and forget logged requests."""
        with self._lock:
            self.counters = ServerCounters()
            self.requests_log.clear()

    # -- faults -----------------------------------------------------------------------------------
    def fail_next(self, status: int = 500, count: int = 1, message: str = "injected failure") -> None:
        """Answer the next `count` requests with an HTTP error."""
        with self._lock:
            self._faults += [Fault("status", status, message) for _ in range(count)]

    def hang_next(self, count: int = 1) -> None:
        """Never answer the next `count` requests (until the server stops)."""
        with self._lock:
            self._faults += [Fault("hang") for _ in range(count)]

    def garbage_next(self, count: int = 1) -> None:
        """Answer the next `count` requests with a body that is not JSON."""
        with self._lock:
            self._faults += [Fault("garbage") for _ in range(count)]

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
                method, path, body = request
                status, payload, raw = await self._route(method, path, body)
                _write_response(writer, status, payload, raw, self.retry_after)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the server is stopping with keep-alive connections open
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, method: str, path: str, body: bytes) -> tuple[int, Any, bytes | None]:
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path.endswith("/models"):
            return (
                200,
                {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "rlm"}]},
                None,
            )
        if method != "POST" or not path.endswith("/chat/completions"):
            return 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}, None
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            return 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}, None
        if request.get("stream"):
            return (
                400,
                {"error": {"message": "streaming is not supported", "type": "invalid_request_error"}},
                None,
            )
        return await self._complete(request)

    async def _complete(self, request: dict[str, Any]) -> tuple[int, Any, bytes | None]:
        messages: list[dict[str, Any]] = request.get("messages") or []
        model = str(request.get("model", "fake"))
        is_root = (
            bool(messages)
            and messages[0].get("role") == "system"
            and ROOT_MARKER in str(messages[0].get("content", ""))
        )
        with self._lock:
            self.counters.requests += 1
            if self.max_in_flight is not None and self.counters.in_flight >= self.max_in_flight:
                self.counters.rate_limited += 1
                message = f"more than {self.max_in_flight} requests in flight"
                return 429, {"error": {"message": message, "type": "rate_limit_error"}}, None
            fault = self._faults.pop(0) if self._faults else None
            self.counters.in_flight += 1
            self.counters.peak_in_flight = max(self.counters.peak_in_flight, self.counters.in_flight)
            if self.keep_requests:
                self.requests_log.append({"model": model, "messages": messages, "root": is_root})
        try:
            if fault is not None:
                self.counters.faults_served += 1
                if fault.kind == "hang":
                    await asyncio.Event().wait()
                if fault.kind == "garbage":
                    return 200, None, b"this is not json"
                error_type = "rate_limit_error" if fault.status == 429 else "server_error"
                return fault.status, {"error": {"message": fault.message, "type": error_type}}, None
            latency = self.root_latency if (is_root and self.root_latency is not None) else self.latency
            if latency:
                await asyncio.sleep(latency)
            if is_root:
                reply = self.root(messages)
            else:
                last = next((m for m in reversed(messages) if m.get("role") == "user"), {"content": ""})
                reply = self.leaf(_text(last.get("content")))
            prompt_tokens = sum(_tokens(_text(m.get("content"))) for m in messages)
            completion_tokens = _tokens(reply)
            with self._lock:
                self.counters.root_requests += is_root
                self.counters.leaf_requests += not is_root
                self.counters.prompt_tokens += prompt_tokens
                self.counters.completion_tokens += completion_tokens
                self.counters.by_model[model] += 1
            return 200, _completion(next(self._ids), model, reply, prompt_tokens, completion_tokens), None
        finally:
            with self._lock:
                self.counters.in_flight -= 1


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _completion(number: int, model: str, reply: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    """One HTTP/1.1 request (Content-Length bodies only), or None when the client closed."""
    line = await reader.readline()
    if not line:
        return None
    try:
        method, path, _version = line.decode("latin-1").split(" ", 2)
    except ValueError:
        return None
    length = 0
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


def _write_response(
    writer: asyncio.StreamWriter, status: int, payload: Any, raw: bytes | None, retry_after: float
) -> None:
    body = raw if raw is not None else json.dumps(payload).encode("utf-8")
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests"}.get(status, "Error")
    extra = f"retry-after: {retry_after:g}\r\n" if status == 429 else ""
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
        f"{extra}connection: keep-alive\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + body)


DEFAULT_PORT = 8000  # where the README points OPENAI_BASE_URL for a local model server
CLI_DESCRIPTION = """A local OpenAI-compatible server (Chat Completions over HTTP on 127.0.0.1), for trying rlm
ask, the examples and your own code without a model or a key: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1.

What it answers by default: a request whose system prompt is the RLM's root prompt gets, on its first turn,
a code block that prints len(context), and then FINAL(done); every other request (an llm_query sub-call)
gets the number that follows "magic number" in its prompt, or NONE. Any model name and any API key are
accepted. Scripted replies, faults and latency per turn are set from Python: FakeOpenAIServer(root=...)."""


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted: ``python -m rlm_adapters.testing.fake_openai --port 8000``."""
    parser = argparse.ArgumentParser(
        prog="python -m rlm_adapters.testing.fake_openai",
        description=CLI_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port on 127.0.0.1, 0 for a free one (default: {DEFAULT_PORT})",
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every request waits (default: 0)")
    args = parser.parse_args(argv)
    try:
        server = FakeOpenAIServer(latency=args.latency, port=args.port).start()
    except RuntimeError as exc:
        parser.exit(2, f"{parser.prog}: {exc} (pick another --port, or 0 for a free one)\n")
    print(f"serving on {server.base_url}", flush=True)
    print(f"set OPENAI_BASE_URL={server.base_url} (any model name and key); Ctrl-C stops", file=sys.stderr)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
