"""The core shared by the local fake model servers (one module per provider wire format).

A `FakeModelServer` is a real HTTP/1.1 server on 127.0.0.1 in a background thread (`_http`). It owns what
every wire format shares: scripted root replies and a leaf policy (`_policies`), latency, injected faults
and counters (`_faults`). A subclass parses its provider's request into plain ``{"role", "content"}``
messages, calls `answer`, and renders the reply or the error in its wire format (and says where its
content lives).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlm_adapters.testing._faults import (
    DELIVERY,
    DELIVERY_FAULTS,
    HUGE_MARK,
    Fault,
    FaultInjection,
    ServerCounters,
)
from rlm_adapters.testing._http import Response, ThreadedHTTPServer, write_response
from rlm_adapters.testing._policies import LeafPolicy, RootPolicy, default_leaf, is_root, scripted_root, text_of, tokens

__all__ = ["Answer", "FakeModelServer", "Response"]


@dataclass(frozen=True)
class Answer:
    """A reply `FakeModelServer.answer` produced, for the subclass to render in its wire format."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    number: int
    truncated: bool = False  # cut at the request's token cap, as a real model's reply would be


class FakeModelServer(ThreadedHTTPServer, FaultInjection):
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

    wire = "model"

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
        super().__init__(host, port)
        if root is None:
            root = ["```repl\nprint(len(context))\n```", "FINAL(done)"]
        self.root: RootPolicy = root if callable(root) else scripted_root(root)
        self.leaf: LeafPolicy = leaf or default_leaf
        self.latency = latency
        self.root_latency = root_latency
        self.max_in_flight = max_in_flight
        self.retry_after = retry_after
        self.counters = ServerCounters()
        self.requests_log: list[dict[str, Any]] = []
        self.headers_log: list[dict[str, str]] = []
        self.keep_requests = True
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._cut = threading.Condition(self._lock)
        self._ids = itertools.count(1)

    @property
    def root(self) -> RootPolicy:
        """The root policy; assign a function of the messages or a list of replies by turn."""
        return self._root

    @root.setter
    def root(self, value: RootPolicy | Sequence[str]) -> None:
        self._root = value if callable(value) else scripted_root(value)

    def reset_counters(self) -> None:
        """Zero the counters and forget logged requests."""
        with self._lock:
            self.counters = ServerCounters()
            self.requests_log.clear()
            self.headers_log.clear()

    async def respond(
        self, writer: asyncio.StreamWriter, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> bool:
        """Log the request, route it (the subclass) and write the reply, as a delivery fault says if one came."""
        if self.keep_requests:
            with self._lock:
                self.headers_log.append({"method": method, "path": path, **headers})
        DELIVERY.set(None)
        status, payload, raw, extra = await self.route(method, path, body)
        fault = DELIVERY.get()
        if fault is None:
            write_response(writer, status, payload, raw, extra)
            await writer.drain()
            return True
        return await self.deliver(writer, status, payload, extra, fault, raw)

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
        root = is_root(messages)
        with self._lock:
            self.counters.requests += 1
            if self.max_in_flight is not None and self.counters.in_flight >= self.max_in_flight:
                self.counters.rate_limited += 1
                return self._too_many(f"more than {self.max_in_flight} requests in flight", None)
            fault = self.next_fault()
            self.counters.in_flight += 1
            self.counters.peak_in_flight = max(self.counters.peak_in_flight, self.counters.in_flight)
            if self.keep_requests:
                entry = {"model": model, "messages": messages, "root": root, "options": dict(options or {})}
                self.requests_log.append(entry)
        try:
            if fault is not None and fault.kind in DELIVERY_FAULTS:
                self.counters.faults_served += 1
                DELIVERY.set(fault)  # answered as usual, delivered as the fault says
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
            latency = self.root_latency if (root and self.root_latency is not None) else self.latency
            if latency:
                await asyncio.sleep(latency)
            if root:
                reply = self.root(messages)
            else:
                last = next((m for m in reversed(messages) if m.get("role") == "user"), {"content": ""})
                reply = self.leaf(text_of(last.get("content")))
            delivery = DELIVERY.get()
            if delivery is not None and delivery.kind == "huge":
                reply = HUGE_MARK
            reply, truncated = cut_reply(reply, reply_cap_of(options or {}))
            prompt_tokens = sum(tokens(text_of(m.get("content"))) for m in messages)
            completion_tokens = tokens(reply)
            with self._lock:
                self.counters.root_requests += root
                self.counters.leaf_requests += not root
                self.counters.prompt_tokens += prompt_tokens
                self.counters.completion_tokens += completion_tokens
                self.counters.by_model[model] += 1
            return Answer(reply, model, prompt_tokens, completion_tokens, next(self._ids), truncated)
        finally:
            with self._lock:
                self.counters.in_flight -= 1


def reply_cap_of(options: dict[str, Any]) -> int | None:
    """The token cap a request set, in any provider's field (OpenAI's two, Anthropic's, Gemini's and
    Bedrock's nested ones); None when it set none."""
    nested = [options.get("generationConfig"), options.get("inferenceConfig")]
    for where, key in [(options, "max_completion_tokens"), (options, "max_tokens")] + [
        (n, k) for n in nested if isinstance(n, dict) for k in ("maxOutputTokens", "maxTokens")
    ]:
        value = where.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def cut_reply(reply: str, cap: int | None) -> tuple[str, bool]:
    """`reply` cut where a real model would stop at `cap` tokens (the servers bill four characters a token),
    and whether it was cut."""
    if cap is None or tokens(reply) <= cap:
        return reply, False
    return reply[: cap * 4], True
