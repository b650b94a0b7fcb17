"""The worker's tagged value codec within bounds (issue 24, defect 1)."""

from __future__ import annotations

import datetime
import decimal
import json
import time
from typing import Any

import pytest

from rlm_adapters.core.sandbox.programs.worker import (
    ROUTING,
    TAG,
    BoundExceeded,
    DecodeBounds,
    Repl,
    ValueEncodingError,
    decode_value,
    encode_value,
)

P = 2**61 - 1


ROUND_TRIP = [
    {(1, 2): {1, 2}, "b": b"\x00x", 3: [frozenset({1})], 1.5: None},
    [datetime.datetime(2024, 1, 2, 3, 4), datetime.date(2024, 1, 2), datetime.time(1, 2)],
    [datetime.timedelta(seconds=3), decimal.Decimal("1.25"), 2 + 3j, ("t",)],
]


@pytest.mark.parametrize("value", ROUND_TRIP)
def test_the_bounded_decoder_gives_back_what_was_encoded(value: Any) -> None:
    encoded = json.loads(json.dumps(encode_value(value)))
    assert decode_value(encoded, DecodeBounds()) == value == decode_value(encoded)


def _colliding(count: int) -> dict[str, Any]:
    return {TAG: "dict", "items": [[k * P, 0] for k in range(count)]}


FLOODS: dict[str, tuple[Any, str]] = {
    "int-keys": (_colliding(20_000), "max_equal_hashes"),
    "tuple-keys": (
        {TAG: "dict", "items": [[{TAG: "tuple", "items": [k * P]}, 0] for k in range(5_000)]},
        "max_equal_hashes",
    ),
    "set": ({TAG: "set", "items": [k * P for k in range(20_000)]}, "max_equal_hashes"),
    "frozenset": ({TAG: "frozenset", "items": [k * P for k in range(20_000)]}, "max_equal_hashes"),
    "too-many-keys": ({TAG: "dict", "items": [[k, 0] for k in range(100_001)]}, "max_keys"),
    "too-deep": (json.loads("[" * 150 + "]" * 150), "max_depth"),
    "too-many-items": ([[0] * 1000] * 1001, "max_items"),
    "a-long-string": (["x" * (64 * 1024 * 1024 + 1)], "max_chars"),
    "a-long-decimal": ({TAG: "Decimal", "text": "9" * 10_001}, "max_chars"),
    "a-long-iso-date": ({TAG: "date", "iso": "2" * 65}, "max_chars"),
}


def _walk(value: Any) -> int:
    """A plain linear walk of decoded JSON in Python: the cost any reader of the input pays."""
    if isinstance(value, dict):
        return 1 + sum(_walk(item) for item in value.values())
    if isinstance(value, list):
        return 1 + sum(_walk(item) for item in value)
    return len(value) if isinstance(value, str) else 1


def _seconds(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _refused(data: Any) -> BoundExceeded:
    with pytest.raises(BoundExceeded) as caught:
        decode_value(data, DecodeBounds())
    return caught.value


@pytest.mark.parametrize("name", sorted(FLOODS))
@pytest.mark.slow
def test_each_bound_is_named_and_costs_no_more_than_the_input(name: str) -> None:
    data, bound = FLOODS[name]
    assert _refused(data).bound == bound
    # Linear, as a ratio to a walk of the same input timed in the same test (a busy machine slows both):
    # a hash flood or a quadratic copy costs hundreds of walks; the bounded decoder a few.
    walk = min(_seconds(lambda: _walk(data)) for _ in range(3))
    decode = min(_seconds(lambda: _refused(data)) for _ in range(3))
    assert decode < 25 * walk + 0.05, (decode, walk)


def test_a_few_equal_hashes_are_honest_data() -> None:
    # -1 and -2 hash alike; so do 1, 2**61 and 1 + P: far below the bound.
    value = {-1: "a", -2: "b", 1: "c", 2**61: "d", 1 + P: "e"}
    assert decode_value(json.loads(json.dumps(encode_value(value))), DecodeBounds()) == value


def test_malformed_tagged_data_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueEncodingError, match="must be a list"):
        decode_value({TAG: "tuple", "items": "abc"}, DecodeBounds())
    with pytest.raises(ValueEncodingError, match="unknown encoded type"):
        decode_value({TAG: "pickle", "data": "..."}, DecodeBounds())


def test_a_final_value_too_big_for_one_frame_keeps_its_text() -> None:
    repl = Repl("ctx", lambda kind, args: None)
    try:
        result = repl.execute("x = [0] * 600_000\nFINAL_VAR('x')")
    finally:
        ROUTING.reset()
    assert result["final"]["value"] is None and result["final"]["text"].startswith("[\n  0,")
