"""Parsing a frame from the worker with bounded work (`frames.parse_body`) and tool arguments within bounds."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from rlm_adapters.core.sandbox.base import CallError
from rlm_adapters.core.sandbox.frames import BadFrame, check_frame, parse_body, read_body
from rlm_adapters.core.sandbox.programs.worker import TAG, ProtocolError
from rlm_adapters.core.sandbox.toolargs import decode_tool_args


def refusal_and_parse_seconds(body: bytes, refusal: str) -> tuple[float, float]:
    """The quickest of three refusals of `body` and the time a plain json.loads of it takes, on this machine now.

    A ratio to a parse measured in the same test holds on a busy machine, where a bound in seconds does not.
    """
    refusals = []
    for _ in range(3):
        started = time.perf_counter()
        with pytest.raises(ProtocolError, match=refusal):
            parse_body(body)
        refusals.append(time.perf_counter() - started)
    started = time.perf_counter()
    json.loads(body)
    return min(refusals), time.perf_counter() - started


def test_a_frame_of_too_many_values_is_refused_before_it_is_parsed() -> None:
    body = b'{"type": "call", "args": [' + b"[]," * 1_000_000 + b"[]]}"
    refused, parsed = refusal_and_parse_seconds(body, "more than 1,000,000 JSON values")
    assert refused < parsed / 3


def test_commas_inside_texts_do_not_count() -> None:
    text = "a, b, [c], {d}, " * 200_000  # 3.2 MB of an honest answer
    message = {"type": "final", "id": 1, "final": {"text": text, "value": None}}
    assert parse_body(json.dumps(message).encode())["final"]["text"] == text


def test_the_digits_of_long_integers_have_a_budget() -> None:
    honest = {"type": "call", "args": [10**30] * 100_000}
    assert parse_body(json.dumps(honest).encode())["args"][0] == 10**30
    # 4,000 numbers: the refusal stops at the budget, a parse pays for all of them (about 4x more here).
    flood = b'{"type": "call", "args": [' + b",".join([b"9" * 4000] * 4000) + b"]}"
    refused, parsed = refusal_and_parse_seconds(flood, "too many digits")
    assert refused < parsed / 2


def test_a_frame_of_an_unknown_type_is_refused() -> None:
    with pytest.raises(BadFrame, match="unknown type 'bogus'"):
        read_body(b'{"type": "bogus"}')
    assert check_frame({"type": "ready", "ok": True}) == ("ready", {"type": "ready", "ok": True})


def test_a_final_value_too_deep_to_walk_keeps_the_answer_text() -> None:
    deep: object = []
    for _ in range(5000):
        deep = [deep]
    kind, (cell_id, final) = check_frame({"type": "final", "id": 3, "final": {"text": "the answer", "value": deep}})
    assert (kind, cell_id, final.text, final.value) == ("final", 3, "the answer", None)


P = 2**61 - 1


async def test_small_tool_arguments_are_decoded_on_the_loop_large_ones_in_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    offloaded: list[object] = []
    real = asyncio.to_thread

    async def spy(function: Callable[..., Any], /, *args: Any) -> Any:
        offloaded.append(args[0])
        return await real(function, *args)

    monkeypatch.setattr(asyncio, "to_thread", spy)
    small = {"args": [{TAG: "tuple", "items": [1, 2]}], "kwargs": {"k": {TAG: "set", "items": [3]}}}
    assert await decode_tool_args("t", small) == ([(1, 2)], {"k": {3}})
    assert offloaded == []
    large = {"args": [list(range(50_000))], "kwargs": {}}
    assert await decode_tool_args("t", large) == ([list(range(50_000))], {})
    assert offloaded == [large]


async def test_tool_arguments_past_a_bound_are_a_failed_call_naming_it() -> None:
    flood = {"args": [{TAG: "dict", "items": [[k * P, 0] for k in range(60_000)]}], "kwargs": {}}
    started = time.perf_counter()
    with pytest.raises(CallError, match=r"tool 'lookup': its arguments were refused: .* \(limit: max_equal_hashes\)"):
        await decode_tool_args("lookup", flood)
    assert time.perf_counter() - started < 2.0
    with pytest.raises(CallError, match=r"undecodable arguments: .*keyword argument names must be strings"):
        await decode_tool_args("lookup", {"args": [], "kwargs": {TAG: "dict", "items": [[1, 2]]}})
    with pytest.raises(CallError, match="undecodable arguments"):
        await decode_tool_args("lookup", {"args": {TAG: "bytes", "b64": "!!"}, "kwargs": {}})
