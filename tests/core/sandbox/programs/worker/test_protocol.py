"""The worker's frames: cut and bounded alike at both ends, counted without parsing, and the protocol's description."""

from __future__ import annotations

import ast
import io
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.sandbox import cells, channel
from rlm_adapters.core.sandbox.programs import worker_files
from rlm_adapters.core.sandbox.programs.worker import (
    CallFailed,
    ProtocolError,
    WorkerChannel,
    count_values,
    encode_frame,
    read_frame,
)
from rlm_adapters.core.sandbox.programs.worker import protocol as worker_protocol


def _marks(value: Any) -> int:
    """The commas and opening brackets of `value`'s JSON outside its strings, from the value itself."""
    if isinstance(value, list | dict):
        children = value if isinstance(value, list) else list(value.values())
        return 1 + max(0, len(children) - 1) + sum(_marks(v) for v in children)
    return 0


def _exact(value: Any) -> int:
    return 1 + _marks(value)


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, [3, {"a,[{": 'x,"[', "b": [[], []]}]],
        {"k\\": '\\\\"', "z": [1, "\\", '"', "\\,"]},
        ["," * 50, "[" * 50, '\\",' * 20],
        "a plain, long, string, with [brackets] and {braces}",
        [],
    ],
)
def test_count_values_counts_only_what_is_outside_strings(value: Any) -> None:
    body = json.dumps(value).encode()
    assert count_values(body, 10**9) >= _exact(value)  # the cheap pass over-counts, never under
    assert count_values(body, _exact(value) - 1) > _exact(value) - 1  # past the limit: says so
    exact = count_values(body, _exact(value))  # the exact pass runs once the cheap one passes the limit
    assert exact == _exact(value)


def _seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def test_count_values_is_linear_on_what_makes_parsers_slow() -> None:
    lists = b"[" + b"[]," * 3_000_000 + b"[]]"
    escapes = b'["' + b"\\n," * 3_000_000 + b'"]'
    for body in (lists, escapes):
        # A ratio to parsing the same body, timed in this test (a busy machine slows both): the count must
        # cost no more than a parse (it is 0.05x of one for the lists, 0.6x for the escapes; a count that
        # rescanned per value would cost thousands).
        parse = min(_seconds(partial(json.loads, body)) for _ in range(2))
        count = min(_seconds(partial(count_values, body, 1_000_000)) for _ in range(2))
        assert count < 2 * parse + 0.02, (count, parse)
    assert count_values(lists, 1_000_000) > 1_000_000
    assert count_values(escapes, 1_000_000) == 2  # one list of one string, whatever the string holds


def test_a_call_too_big_for_the_host_fails_in_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The honest worker refuses the call itself: the host would refuse the frame and restart the worker."""
    sent: list[bytes] = []
    ends = WorkerChannel(None, None)  # type: ignore[arg-type]
    monkeypatch.setattr(ends, "_write", sent.append)
    with pytest.raises(CallFailed, match="more than 1,000,000 JSON values"):
        ends.call("rlm_query", {"prompt": "p", "context": [0] * 1_000_001})
    assert sent == []


def test_frames_round_trip_and_a_cut_frame_is_a_protocol_error() -> None:
    frame = encode_frame({"type": "exec", "code": "print('ü')"})
    assert read_frame(io.BytesIO(frame)) == {"type": "exec", "code": "print('ü')"}
    assert read_frame(io.BytesIO(b"")) is None
    with pytest.raises(ProtocolError, match="stream ended after"):
        read_frame(io.BytesIO(frame[:-3]))
    with pytest.raises(ProtocolError, match="not valid JSON"):
        read_frame(io.BytesIO(b"\x00\x00\x00\x03abc"))


def test_the_docstring_names_every_frame_either_side_sends() -> None:
    """The protocol's description is its module's docstring: a frame type added on either side must be in it."""
    sent: set[str] = set()
    for path in [*worker_files().values(), Path(channel.__file__ or ""), Path(cells.__file__ or "")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "type" and isinstance(value, ast.Constant):
                        sent.add(str(value.value))
    assert {"init", "exec", "reply", "ready", "result", "final", "call"} <= sent  # the walk found the frames
    assert sorted(t for t in sent if f"``{t}``" not in (worker_protocol.__doc__ or "")) == []
