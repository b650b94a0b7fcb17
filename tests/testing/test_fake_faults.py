"""The fake servers' faults as a plain HTTP client sees them: trickled, oversized, reshaped and re-contented
replies, and the Anthropic wire format."""

from __future__ import annotations

import gzip
import json
import socket
import time
from typing import Any

import httpx

from rlm_adapters.testing import FakeAnthropicServer, FakeOpenAIServer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "the magic number is 1234"}]}


def post(server: FakeOpenAIServer, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/chat/completions", json=CHAT, timeout=30, **kwargs)


def test_a_trickled_reply_arrives_whole_but_slowly() -> None:
    with FakeOpenAIServer() as server:
        server.trickle_next(interval=0.002, chunk=16)
        started = time.monotonic()
        response = post(server)
        assert response.json()["choices"][0]["message"]["content"] == "1234"
        assert time.monotonic() - started >= 0.002 * len(response.content) / 16 * 0.5
        assert server.counters.bytes_sent == len(response.content)


def test_an_oversized_reply_is_valid_json_of_the_size_asked_plain_chunked_or_gzipped() -> None:
    with FakeOpenAIServer() as server:
        for options in ({}, {"chunked": True}, {"gzip": True}):
            server.huge_next(3 * 2**20 + 5, **options)
            response = post(server)
            text = response.json()["choices"][0]["message"]["content"]
            assert text == "x" * (3 * 2**20 + 5), options
            chunked = "content-length" not in response.headers
            assert chunked == bool(options), options
            assert response.headers.get("content-encoding") == ("gzip" if options.get("gzip") else None)


def test_a_gzipped_oversized_reply_is_small_on_the_wire() -> None:
    with FakeOpenAIServer() as server:
        server.huge_next(64 * 2**20, gzip=True)
        with httpx.stream("POST", f"{server.base_url}/chat/completions", json=CHAT, timeout=30) as response:
            wire = b"".join(response.iter_raw())
        assert len(wire) < 2**20
        assert len(gzip.decompress(wire)) > 64 * 2**20


def test_a_client_hanging_up_on_an_oversized_reply_is_counted() -> None:
    with FakeOpenAIServer() as server:
        server.huge_next(256 * 2**20)
        body = json.dumps(CHAT).encode()
        with socket.create_connection((server.host, server.port)) as sock:
            head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body)
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        assert server.wait_cut_off(1)
        assert server.counters.bytes_sent < 256 * 2**20


def test_reshape_and_content_replace_what_is_sent() -> None:
    with FakeOpenAIServer() as server:
        server.content_next([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        parts = post(server).json()["choices"][0]["message"]["content"]
        assert parts == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
        server.reshape_next(lambda payload: {**payload, "usage": {"prompt_tokens": "many"}})
        assert post(server).json()["usage"] == {"prompt_tokens": "many"}
        server.reshape_next(lambda payload: b"\xff raw bytes")
        assert post(server).content == b"\xff raw bytes"
        assert post(server).json()["choices"][0]["message"]["content"] == "1234"  # one reply each
        assert server.counters.faults_served == 3


def test_the_anthropic_fake_speaks_the_messages_api() -> None:
    with FakeAnthropicServer() as server:
        request = {
            "model": "claude",
            "max_tokens": 64,
            "system": "be brief",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "magic number 777"}]}],
        }
        reply = httpx.post(f"{server.url}/v1/messages", json=request, timeout=30).json()
        assert reply["type"] == "message" and reply["content"] == [{"type": "text", "text": "777"}]
        assert reply["usage"]["input_tokens"] > 0
        assert server.requests_log[0]["messages"][0] == {"role": "system", "content": "be brief"}
        server.fail_next(429, retry_after="5")
        limited = httpx.post(f"{server.url}/v1/messages", json=request, timeout=30)
        assert limited.status_code == 429 and limited.headers["retry-after"] == "5"
        assert limited.json()["error"]["type"] == "rate_limit_error"
        bad = httpx.post(f"{server.url}/v1/messages", json={"messages": []}, timeout=30)
        assert bad.status_code == 400 and bad.json()["type"] == "error"
