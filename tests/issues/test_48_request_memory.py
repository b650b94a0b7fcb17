"""Issue 48, item 4: memory per request in `rlm serve`.

A refused 60 MB body peaked the server at 1.6 GB; each valid 60 MB request waiting for a slot held about 1 GB
(76 -> 4,236 MB with four waiting), the defaults admitted 20 of them from any local process, and bodies still
being read were not counted at all. Now a request is counted before its body is read; a checked request that
waits keeps its body's bytes, not the parsed conversation; and a body of more JSON values than any chat
request needs is refused before it is parsed. The figures before and after are `benchmarks.serve_memory_bench`
(docs/serve.md); these tests pin the mechanisms.
"""

from __future__ import annotations

import argparse
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest

from rlm_adapters.cli.serve import add_parser
from rlm_adapters.serve import ServeConfig
from rlm_adapters.serve import request as request_module
from rlm_adapters.serve.app import CHECKS_AT_ONCE, Server
from rlm_adapters.serve.errors import OpenAIError
from rlm_adapters.serve.request import MAX_JSON_VALUES, count_values, parse_request
from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served, served_config
from tests.serve.conftest import serve as serve  # `rlm serve` in a thread, stopped at the test's end (a fixture)
from tests.serve.conftest import upstream as upstream  # the fake OpenAI server it calls (a fixture)
from tests.serve.test_safety import RAW_HEAD, a_run_in_flight, raw_post


def status_of(conn: socket.socket) -> bytes:
    conn.settimeout(60)
    return conn.recv(65536).split(b"\r\n", 1)[0]


def test_a_body_still_being_read_counts_against_the_waiting_room(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """One slot, one place to wait: a run holds the slot and a client is still sending its body, so the
    next request is refused at once (it used to be admitted: bodies being read were not counted)."""
    served = serve(served_config(upstream, max_runs=1, max_waiting=1))
    with a_run_in_flight(served, upstream), socket.create_connection(("127.0.0.1", served.port)) as slow:
        body = json.dumps({"model": "test", "messages": [{"role": "user", "content": "x" * 10_000}]}).encode()
        slow.sendall(RAW_HEAD + f"content-length: {len(body)}\r\n\r\n".encode() + body[:100])  # the rest never comes
        with socket.create_connection(("127.0.0.1", served.port)) as late:
            late.sendall(raw_post({"model": "test", "messages": [{"role": "user", "content": "hi"}], "stream": True}))
            assert status_of(late) == b"HTTP/1.1 429 Too Many Requests"


def test_a_refused_request_is_refused_before_its_body_is_read(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """A full server answers 429 from the headers: a client cannot make it hold a 64 MiB body to refuse."""
    served = serve(served_config(upstream, max_runs=1, max_waiting=0))
    with a_run_in_flight(served, upstream), socket.create_connection(("127.0.0.1", served.port)) as late:
        late.sendall(RAW_HEAD + b"content-length: 60000000\r\n\r\n")  # announced, never sent
        assert status_of(late) == b"HTTP/1.1 429 Too Many Requests"


def test_a_waiting_request_holds_its_bytes_not_its_parsed_conversation(upstream: FakeOpenAIServer) -> None:
    server = Server(served_config(upstream))
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello " * 1000}]
    body = json.dumps({"model": "test", "messages": messages}).encode()
    prepared = server.prepare(body)
    try:
        assert prepared.body is body and prepared.request.entries == []
        assert prepared.request.instructions == "be brief"
        context, query, given = prepared.take_input()  # on the run's thread, when its slot is free
        assert context == "hello " * 1000 and "hello" in query
        assert [entry["role"] for entry in given["chat"]] == ["user"]  # for the direct route (system: instructions)
        assert prepared.body is None  # dropped once read again
        with pytest.raises(RuntimeError, match="taken once"):
            prepared.take_input()
    finally:
        prepared.rlm.close()


def test_a_body_of_millions_of_values_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """60 MB of ``{},`` is 20 million dicts (1.4 GB parsed); counted in the bytes, it is never parsed."""

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(request_module.json, "loads", never)
    for values in (b"{}", b"[]", b'"ab"', b"1.5"):
        body = b'{"model": "test", "messages": [' + b",".join([values] * (MAX_JSON_VALUES + 1)) + b"]}"
        with pytest.raises(OpenAIError, match="more than 1,000,000 JSON values") as caught:
            parse_request(body)
        assert caught.value.status == 400


def test_commas_and_brackets_inside_strings_are_not_values() -> None:
    """A long text full of commas (a CSV pasted as a message) is one value: it is counted outside strings,
    escapes and all."""
    text = ',[{"\\\\' * 400_000  # 2.4 MB of what a naive count would take for 1.6 million values
    body = json.dumps({"model": "test", "messages": [{"role": "user", "content": text}]}).encode()
    count_values(body)  # no error
    assert parse_request(body).entries[0]["content"] == text


def test_the_defaults_bound_what_waits() -> None:
    """The defaults, sized from the figures in docs/serve.md: 4 runs and 8 waiting, bodies up to 64 MiB, two
    bodies parsed at once (the command line's defaults are the same)."""
    defaults = ServeConfig.__dataclass_fields__
    assert (defaults["max_runs"].default, defaults["max_waiting"].default) == (4, 8)
    assert defaults["max_body_bytes"].default == 64 * 1024 * 1024 and CHECKS_AT_ONCE == 2
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve"])
    assert (args.max_runs, args.max_waiting, args.max_body_bytes) == (4, 8, 64 * 1024 * 1024)
