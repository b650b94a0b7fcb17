"""Who may call, what a run may use, and what a client that leaves costs: loopback, token, Host, Origin,
ceilings, disconnects, the call cache, a 3 MB message, the default sandbox."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from rlm_adapters.core import RLMLogger
from rlm_adapters.core.cache import open_cache
from rlm_adapters.core.sandbox import sandbox_kinds
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.serve import Ceilings, ServeConfig, parse_model
from rlm_adapters.testing import FakeOpenAIServer, scripted_root, turn_of
from tests.core.sandbox.helpers import descendants
from tests.mcp_server.exits import exited
from tests.serve.conftest import ANSWER_SCRIPT, Served, served_config

ASK = [{"role": "user", "content": "What is the magic number?"}]
# A chat completion's request line and headers, as a client that then stalls or leaves writes them itself.
RAW_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"


def raw_post(payload: dict[str, Any]) -> bytes:
    """The whole raw HTTP/1.1 request of a chat completion whose JSON body is `payload`."""
    body = json.dumps(payload).encode()
    return RAW_HEAD + f"content-length: {len(body)}\r\n\r\n".encode() + body


def sdk(served: Served, key: str = "k", **options: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key=key, max_retries=0, **options)  # type: ignore[arg-type]


def test_off_loopback_a_token_is_required() -> None:
    model = parse_model("m=root")
    with pytest.raises(ConfigurationError, match=r"--host '0\.0\.0\.0' is not loopback: set a token"):
        ServeConfig([model], host="0.0.0.0")
    assert ServeConfig([model], host="0.0.0.0", token="secret").token == "secret"


def test_with_a_token_the_api_key_must_be_it(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, token="s3cret"))
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk(served, "wrong").chat.completions.create(model="test", messages=ASK)
    assert caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        sdk(served, "wrong").models.list()
    assert httpx.get(f"{served.base_url}/models").status_code == 401
    assert upstream.counters.requests == 0
    assert sdk(served, "s3cret").chat.completions.create(model="test", messages=ASK).choices[0].message.content == "42"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example:8000"}, 421),  # DNS rebinding: a page's own name pointed at 127.0.0.1
        ({"origin": "https://evil.example"}, 403),  # a web page of another site
        ({"origin": "null"}, 403),
        ({"host": "localhost:1234", "origin": "http://localhost:3000"}, 200),
        ({"host": "[::1]:80"}, 200),
    ],
)
def test_host_and_origin_are_checked_on_loopback(served: Served, headers: dict[str, str], status: int) -> None:
    response = httpx.get(f"{served.base_url}/models", headers=headers)
    assert response.status_code == status
    if status != 200:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_a_limit_above_the_ceiling_is_refused_and_omitted_ones_take_it() -> None:
    with pytest.raises(
        ConfigurationError, match=r"max_cost=5 is above the server's ceiling 1.0 \(raise it with --max-cost\)"
    ):
        parse_model("m=root,max_cost=5")
    ceilings = Ceilings(max_cost=2.0, timeout=60, max_sub_calls=9)
    model = parse_model("m=root,max_cost=0.5", ceilings)
    limits = model.run_limits(ceilings)
    assert (limits["max_cost"], limits["run_timeout"], limits["max_sub_calls"]) == (0.5, 60, 9)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("rlm-mini", "write NAME=ROOT_MODEL"),
        ("a b=root", "may hold only"),
        ("m=root,colour=red", "unknown key 'colour'"),
        ("m=root,max_cost=cheap", "max_cost=.cheap. is not a number"),
        ("m=root,sub", "is not key=value"),
        ("m=root,backend=nope", "is not one of"),
        ("m=root,sub=a,sub=b", "given twice"),
    ],
)
def test_bad_model_flags_are_named(spec: str, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        parse_model(spec)


def test_the_served_models_limits_bound_the_run(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, "tight=root-model,sub=leaf-model,base_url={url},max_iterations=1"))
    upstream.root = ["```repl\nprint(1)\n```"]  # never finishes on its own
    reply = sdk(served).chat.completions.create(model="tight", messages=ASK)
    assert upstream.counters.root_requests <= 2  # one turn, and at most the final-answer request
    assert reply.choices[0].finish_reason == "length"
    assert reply.model_extra is not None and reply.model_extra["rlm"]["finish_reason"] == "max_iterations"


@contextlib.contextmanager
def a_run_in_flight(served: Served, upstream: FakeOpenAIServer, stream: bool = True) -> Iterator[None]:
    """Post a request over a raw socket; once its run's first root call has reached the upstream (whose reply
    trickles, so that the call stays in flight), yield; then hang up."""
    arrived = threading.Event()
    script = upstream.root

    def root(messages: list[dict[str, Any]]) -> str:
        arrived.set()
        return script(messages)

    upstream.root = root
    upstream.trickle_next(interval=0.5)
    request = raw_post({"model": "test", "messages": ASK, "stream": stream})
    with socket.create_connection(("127.0.0.1", served.port)) as conn:
        conn.sendall(request)
        assert arrived.wait(60), "the run's root call never reached the upstream"
        upstream.root = script
        yield


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_stops_its_run(
    stream: bool, upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """The run's model call in flight is hung up on, and with one run slot, the next request is answered."""
    served = serve(served_config(upstream, max_runs=1, max_waiting=1))
    with a_run_in_flight(served, upstream, stream):
        pass
    assert upstream.wait_cut_off(timeout=60), "the run's upstream call was not hung up on"
    assert (
        sdk(served, timeout=60).chat.completions.create(model="test", messages=ASK).choices[0].message.content == "42"
    )
    assert not served.app.state.server.runs


def test_other_clients_are_served_while_a_run_works(served: Served, upstream: FakeOpenAIServer) -> None:
    with a_run_in_flight(served, upstream):
        assert httpx.get(f"{served.base_url}/models", timeout=30).status_code == 200
        second = sdk(served, timeout=60).chat.completions.create(model="test", messages=ASK)
        assert second.choices[0].message.content == "42"


def test_a_full_server_says_429(upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]) -> None:
    served = serve(served_config(upstream, max_runs=1, max_waiting=0))
    with a_run_in_flight(served, upstream), pytest.raises(openai.RateLimitError) as caught:
        sdk(served).chat.completions.create(model="test", messages=ASK)
    assert caught.value.code == "server_busy"


def test_with_the_call_cache_a_retried_request_is_free(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served], tmp_path: Path
) -> None:
    cache, _owned = open_cache(tmp_path / "calls.sqlite")
    served = serve(served_config(upstream, cache=cache))
    upstream.root = ["```repl\nx = llm_query('the magic number is 4242')\nprint(x)\n```", "FINAL(4242)"]
    first = sdk(served).chat.completions.create(model="test", messages=ASK)
    paid = upstream.counters.requests
    again = sdk(served).chat.completions.create(model="test", messages=ASK)
    assert upstream.counters.requests == paid == 3
    assert again.choices[0].message.content == first.choices[0].message.content == "4242"
    assert again.usage == first.usage  # replayed calls count as the originals did
    assert again.model_extra is not None and again.model_extra["rlm"]["cost"] == 0


def test_a_3_mb_message_never_reaches_the_root_models_prompt(served: Served, upstream: FakeOpenAIServer) -> None:
    document = ("lorem ipsum dolor sit amet " * 120_000)[:3_000_000] + " the magic number is 777 "
    upstream.root = ["```repl\nprint(len(context), context[-40:])\n```", "FINAL(777)"]
    messages = [{"role": "user", "content": document + "\nWhat is the magic number?"}]
    reply = sdk(served, timeout=120).chat.completions.create(model="test", messages=messages)
    assert reply.choices[0].message.content == "777"
    sizes = [len(str(entry["messages"])) for entry in upstream.requests_log if entry["root"]]
    assert len(sizes) == 2
    assert max(sizes) < 20_000  # 3 MB in, a few KB to the root model: description, quoted ends, printed output


@pytest.mark.parametrize("kind", ["subprocess"])
def test_the_default_sandbox_runs_the_code(
    kind: str, upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    assert kind in sandbox_kinds() and ServeConfig([parse_model("m=r")]).environment == kind
    served = serve(served_config(upstream, environment=kind))
    reply = sdk(served, timeout=120).chat.completions.create(model="test", messages=ASK)
    assert reply.choices[0].message.content == "42"
    assert reply.model_extra is not None and reply.model_extra["rlm"]["finish_reason"] == "final"


def test_with_the_call_cache_a_client_that_retries_after_leaving_pays_only_for_the_rest(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served], tmp_path: Path
) -> None:
    """The client leaves while the second root call is in flight; its retry replays the first root call and
    the sub-call from the cache and goes live at the second root call: 4 upstream requests in all, not 6."""
    cache, _owned = open_cache(tmp_path / "calls.sqlite")
    served = serve(served_config(upstream, cache=cache, max_runs=1))
    arrived, released = threading.Event(), threading.Event()
    script = scripted_root(["```repl\nx = llm_query('the magic number is 4242')\nprint(x)\n```", "FINAL(4242)"])

    def root(messages: list[dict[str, Any]]) -> str:
        if turn_of(messages) == 1 and not released.is_set():
            arrived.set()
            released.wait(60)  # holds this reply (and the fake server) until the client has gone
        return script(messages)

    upstream.root = root
    request = raw_post({"model": "test", "messages": ASK})
    with socket.create_connection(("127.0.0.1", served.port)) as conn:
        conn.sendall(request)
        assert arrived.wait(60)
    runs = served.app.state.server.runs
    for _ in range(1200):  # the server notices the hang-up and stops the run (its own thread)
        if not runs:
            break
        time.sleep(0.05)
    assert not runs, "the run did not stop when its client left"
    released.set()
    assert upstream.counters.requests == 3
    reply = sdk(served, timeout=60).chat.completions.create(model="test", messages=ASK)
    assert reply.choices[0].message.content == "4242"
    assert upstream.counters.requests == 4
    assert reply.model_extra is not None and reply.model_extra["rlm"]["calls"] == 3


class BlockingLogger(RLMLogger):
    """A trajectory logger whose first `open_run` blocks its caller, the run's own event loop, until `gate` is
    set: that run's loop can do nothing else meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = threading.Event(), threading.Event()
        self.opened = 0

    def open_run(self, run_id: str, header: dict[str, Any]) -> Any:
        self.opened += 1
        if self.opened == 1:
            self.entered.set()
            self.gate.wait(120)
        return super().open_run(run_id, header)


def test_a_run_whose_loop_is_blocked_delays_no_other_client(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """While one run's event loop is held (a synchronous call that does not return until the test says so),
    another client's 20 model listings and a whole completion (a run of its own) are answered: bounded by
    counts, not by a clock. Were runs on the server's loop, none of them could be answered until the gate."""
    blocking = BlockingLogger()
    served = serve(served_config(upstream, logger=blocking))
    first: list[Any] = []
    thread = threading.Thread(
        target=lambda: first.append(sdk(served, timeout=120).chat.completions.create(model="test", messages=ASK))
    )
    thread.start()
    try:
        assert blocking.entered.wait(60), "the first run never started"
        with httpx.Client(base_url=served.base_url, timeout=60) as other:
            listings = [other.get("/models").status_code for _ in range(20)]
        second = sdk(served, timeout=60).chat.completions.create(model="test", messages=ASK)
        assert listings == [200] * 20
        assert second.choices[0].message.content == "42"
        assert not blocking.gate.is_set() and not first, "the first run was still held all along"
    finally:
        blocking.gate.set()
        thread.join(120)
    assert first[0].choices[0].message.content == "42"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the sandbox worker through /proc")
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_closes_its_runs_sandbox(
    stream: bool, upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """The run has executed a cell in the default sandbox (a worker process) and waits on its second root
    call when the client hangs up: the call is cut off and the worker process exits."""
    served = serve(served_config(upstream, environment="subprocess"))
    arrived = threading.Event()
    script = scripted_root(["```repl\nprint('the sandbox ran this')\n```", "FINAL(late)"])

    def root(messages: list[dict[str, Any]]) -> str:
        if turn_of(messages) == 0:
            upstream.trickle_next(interval=0.5)  # the next reply, the second root call's, trickles
        else:
            arrived.set()
        return script(messages)

    upstream.root = root
    before = set(descendants())
    request = raw_post({"model": "test", "messages": ASK, "stream": stream})
    with socket.create_connection(("127.0.0.1", served.port)) as conn:
        conn.sendall(request)
        assert arrived.wait(120), "the run's second root call never came"
        workers = set(descendants()) - before
        assert workers, "the subprocess sandbox runs as a child process"
    assert upstream.wait_cut_off(timeout=60), "the run's upstream call was not hung up on"
    assert asyncio.run(exited(workers, 60)) == set(), "the sandbox worker is still running"


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_never_reads_its_answer_does_not_hold_the_server(
    stream: bool, upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """A client asks for a 20 MB answer and never reads a byte (nor hangs up): once the socket's buffers are
    full the server's writes wait. With one run slot, the next client is answered anyway: a write that waits
    past ``send_timeout`` treats its client as gone, and the slot is freed."""
    served = serve(served_config(upstream, max_runs=1, max_waiting=4, send_timeout=1.0))
    big, small = scripted_root(["```repl\nbig = 'x' * 20_000_000\nFINAL_VAR('big')\n```"]), scripted_root(ANSWER_SCRIPT)
    upstream.root = lambda messages: (big if "the big one" in json.dumps(messages[:2]) else small)(messages)
    ask_big = [{"role": "user", "content": "Send me the big one."}]
    request = raw_post({"model": "test", "messages": ask_big, "stream": stream})
    with socket.socket() as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", served.port))
        stalled.sendall(request)
        reply = sdk(served, timeout=120).chat.completions.create(model="test", messages=ASK)
        assert reply.choices[0].message.content == "42"
        assert upstream.counters.root_requests == 3  # the stalled run's one turn, then this run's two


def test_headers_sent_a_byte_at_a_time_lose_their_connection(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """Slowloris: a client sends its headers one byte every 50 ms and never ends them. The connection is
    closed at ``request_timeout`` (0.5 s here), long before the 400 bytes (20 s) are out, and the server
    answers the next client."""
    served = serve(served_config(upstream, request_timeout=0.5))
    header = b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nx-padding: " + b"a" * 400
    sent = 0
    with socket.create_connection(("127.0.0.1", served.port)) as conn:
        conn.settimeout(0.05)
        with contextlib.suppress(OSError):
            for byte in header:
                conn.sendall(bytes([byte]))
                sent += 1
                try:
                    if conn.recv(1) == b"":
                        break  # closed by the server
                except TimeoutError:
                    continue
    assert sent < len(header), "the server kept a connection whose headers never ended"
    assert httpx.get(f"{served.base_url}/models").status_code == 200


def test_a_body_sent_a_byte_at_a_time_is_a_408(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, request_timeout=0.5))
    with socket.create_connection(("127.0.0.1", served.port)) as conn:
        conn.sendall(RAW_HEAD + b"content-length: 1000\r\n\r\n{")
        conn.settimeout(60)
        reply = b""
        while b'"request_timeout"' not in reply and (part := conn.recv(65536)):
            reply += part  # the status line and the body may come in two reads
    assert reply.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in reply
    assert upstream.counters.requests == 0


@pytest.mark.parametrize(
    ("method", "headers", "status"),
    [
        # A hostile page's simple POST: no preflight, text/plain, but the browser adds its Origin.
        ("POST", {"origin": "https://evil.example", "content-type": "text/plain"}, 403),
        ("POST", {"content-type": "text/plain"}, 400),  # no Origin (not a browser): still not JSON
        ("OPTIONS", {"origin": "https://evil.example", "access-control-request-method": "POST"}, 403),
        ("OPTIONS", {"origin": "http://localhost:3000", "access-control-request-method": "POST"}, 405),
        ("POST", {"host": "rebind.evil.example", "content-type": "application/json"}, 421),
    ],
)
def test_what_a_hostile_web_page_can_send_is_refused_and_nothing_is_readable_cross_origin(
    served: Served, upstream: FakeOpenAIServer, method: str, headers: dict[str, str], status: int
) -> None:
    body = json.dumps({"model": "test", "messages": ASK})
    response = httpx.request(method, f"{served.base_url}/chat/completions", content=body, headers=headers)
    assert response.status_code == status
    assert not any(name.lower().startswith("access-control-") for name in response.headers)  # no CORS
    assert upstream.counters.requests == 0


def test_a_chunked_body_over_the_limit_is_a_413(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """No Content-Length to refuse up front: the body is counted as it arrives."""
    served = serve(served_config(upstream, max_body_bytes=10_000))

    def parts() -> Iterator[bytes]:
        yield b'{"model": "test", "messages": [{"role": "user", "content": "'
        for _ in range(100):
            yield b"x" * 1_000
        yield b'"}]}'

    response = httpx.post(
        f"{served.base_url}/chat/completions", content=parts(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    assert upstream.counters.requests == 0


def test_many_concurrent_streams_get_a_slot_a_wait_or_a_429(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """24 streams at once with 2 run slots and 4 waiting places, the runs' model calls never answering: 6
    streams are open (2 running, 4 waiting) and the other 18 are told 429, however the burst interleaves;
    when the 6 clients hang up, both runs stop and nothing is left waiting."""
    served = serve(served_config(upstream, max_runs=2, max_waiting=4))
    upstream.hang_next(2)
    request = raw_post({"model": "test", "messages": ASK, "stream": True})
    conns = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(24)]
    server = served.app.state.server
    try:
        for conn in conns:
            conn.sendall(request)
        statuses = []
        for conn in conns:
            conn.settimeout(60)
            statuses.append(conn.recv(12))  # b"HTTP/1.1 200" or b"HTTP/1.1 429"
        assert sorted(statuses) == [b"HTTP/1.1 200"] * 6 + [b"HTTP/1.1 429"] * 18
        for _ in range(1200):  # the server's loop (another thread) takes the slots and places
            if (len(server.runs), server.waiting, upstream.counters.in_flight) == (2, 4, 2):
                break
            time.sleep(0.05)
        assert (len(server.runs), server.waiting, upstream.counters.in_flight) == (2, 4, 2)
    finally:
        for conn in conns:
            conn.close()
    for _ in range(1200):
        if (len(server.runs), server.waiting, server.admitted) == (0, 0, 0):
            break
        time.sleep(0.05)
    assert (len(server.runs), server.waiting, server.admitted) == (0, 0, 0)
    assert upstream.counters.requests == 2  # the two runs' first calls; no refused or waiting request ran
