"""Issue 35, also covered: hostile calls of the caller's tools from model code (``call_tool``).

Huge arguments, arguments that are not JSON, a tool the run was not given, forged frames whose call ids collide
(or are no ids at all), and hundreds of calls at once from threads. Each gets a clear error in the REPL or in
what the root model is told next; the host never crashes or hangs, and the run ends with what it may keep.
The calls cross the real subprocess sandbox's boundary.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.engine.tool_calls import MAX_CALLS_PER_TURN
from rlm_adapters.testing import by_turn

SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


def repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def run(root: ScriptedModel, **kwargs: Any) -> Any:
    rlm = RLM(backend=root, environment="subprocess", environment_kwargs={"cell_timeout": 60.0})
    try:
        return rlm.completion("the context", "find cats", tools=[SEARCH], **kwargs)
    finally:
        rlm.close()


def told(root: ScriptedModel, call: int) -> str:
    return str(root.calls[call][-1]["content"])


MALFORMED = r"""
cases = {
    'nan': lambda: call_tool('search', {'query': float('nan')}),
    'circular': lambda: (lambda d: (d.__setitem__('d', d), call_tool('search', d)))({}),
    'bytes': lambda: call_tool('search', query=b'raw'),
    'set': lambda: call_tool('search', query={1, 2}),
    'list args': lambda: call_tool('search', ['q']),
    'no name': lambda: call_tool(None, query='q'),
    'huge': lambda: call_tool('search', query='z' * 3_000_000),
}
for label, attempt in cases.items():
    try:
        attempt()
        print(label, 'ACCEPTED')
    except (TypeError, ValueError) as exc:
        print(label, '->', type(exc).__name__, str(exc)[:90].replace(chr(10), ' '))
call_tool('delete_everything', path='/')
call_tool('search', {1: 'an int key becomes "1"'})
"""


def test_malformed_huge_and_unbound_calls_get_clear_errors_and_the_model_mends_them() -> None:
    root = by_turn(repl(MALFORMED), repl("call_tool('search', query='cats')"))
    result = run(root)
    assert result.finish_reason == "tool_calls"
    assert [(c.name, c.args) for c in result.tool_calls] == [("search", {"query": "cats"})]
    after = told(root, 1)
    assert "ACCEPTED" not in after
    for label in ("nan", "circular", "bytes", "set", "list args", "no name"):
        assert f"{label} -> TypeError" in after
    assert "huge -> ValueError call_tool('search'): the arguments are 3,000,0" in after
    # The calls that reached the host: refused, told to the model, none kept.
    assert "None of your tool calls was made" in after
    assert "- delete_everything: there is no tool named" in after
    assert "- search:" in after and "'1'" in after


FORGED = r"""
import sys
channel = call_tool.__self__._call.__self__
encode = sys.modules[type(channel).__module__].encode_frame
for _ in range(50):  # fifty calls in flight under one id
    channel._write(encode({'type': 'call', 'id': 7, 'kind': 'call_tool',
                           'args': {'name': 'search', 'args': {'query': 'forged'}}}))
call_tool('search', query='after the forged ones')
print('still running')
"""


def test_forged_calls_under_one_colliding_id_are_each_a_call_with_an_id_of_its_own() -> None:
    root = by_turn(repl(FORGED), repl("call_tool('search', query='cats')"))
    result = run(root)
    # 51 calls reached the host in one turn (within the per-turn cap): each is checked on its own and gets its
    # own id from the host; the frame id model code chose is only the worker's, and never a result's.
    assert result.finish_reason == "tool_calls" and len(root.calls) == 1
    assert [c.args["query"] for c in result.tool_calls] == ["forged"] * 50 + ["after the forged ones"]
    ids = [c.id for c in result.tool_calls]
    assert len(set(ids)) == 51 and all(i.startswith("call_") and len(i) == 29 for i in ids)


@pytest.mark.parametrize("call_id", ["-1", "'seven'", "None", "7.5", "True"])
def test_a_call_frame_whose_id_is_no_id_ends_the_cell_with_a_named_error_and_the_run_goes_on(call_id: str) -> None:
    code = FORGED.replace("for _ in range(50)", "for _ in range(1)").replace("'id': 7", f"'id': {call_id}")
    root = by_turn(repl(code), repl("print('a new worker')"), "FINAL(done)")
    result = run(root)
    assert result.response == "done" and result.tool_calls == []  # nothing of the stopped cell was kept
    after = told(root, 1)
    assert "the sandbox worker sent an invalid frame ('call' frame: 'id' must be a non-negative integer" in after
    assert "the REPL was restarted" in after and "a new worker" in told(root, 2)


@pytest.mark.parametrize("call_id", ["0", "2**70"])
def test_any_other_number_is_the_workers_own_id_and_harmless(call_id: str) -> None:
    code = FORGED.replace("for _ in range(50)", "for _ in range(3)").replace("'id': 7", f"'id': {call_id}")
    result = run(by_turn(repl(code)))
    assert [c.args["query"] for c in result.tool_calls] == ["forged"] * 3 + ["after the forged ones"]
    assert len({c.id for c in result.tool_calls}) == 4


MANY = """
import threading
errors = []
def call(i):
    try:
        call_tool('search', query=f'q{i}')
    except Exception as exc:
        errors.append(str(exc))
def calls(first):
    for i in range(first, first + 6):
        call(i)
# 32 threads at once (the sandbox's process limit bounds threads), 192 calls in all.
threads = [threading.Thread(target=calls, args=(6 * n,)) for n in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print('refused in the REPL:', len(errors), sorted(set(errors)))
"""


def test_hundreds_of_calls_at_once_are_bounded_and_the_host_keeps_going() -> None:
    root = by_turn(repl(MANY), repl("call_tool('search', query='one')"))
    result = run(root)
    after = told(root, 1)
    refused = 32 * 6 - MAX_CALLS_PER_TURN
    assert f"refused in the REPL: {refused} ['at most {MAX_CALLS_PER_TURN} tool calls per turn']" in after
    assert f"- more than {MAX_CALLS_PER_TURN} calls were made" in after  # and none was kept
    assert [(c.name, c.args) for c in result.tool_calls] == [("search", {"query": "one"})]


TORN = r"""
import struct
channel = call_tool.__self__._call.__self__
channel._write(struct.pack('>I', LENGTH) + b'{"type": "call", "id": 1, "kind": "call_tool", "args": ')
call_tool('search', query='never reaches the host as a call of its own')
"""


@pytest.mark.parametrize("length", [2**32 - 1, 100], ids=["over the frame cap", "a body cut short"])
def test_a_torn_or_oversized_frame_costs_the_cell_never_the_host(length: int) -> None:
    """A frame header promising more than may come, then more frames: the host stops the worker (a named error)
    or reads the next frames as the body, finds no JSON, and stops it; it never waits for bytes that will not come."""
    root = by_turn(repl(TORN.replace("LENGTH", str(length))), "FINAL(done)")
    result = run(root)
    assert result.response == "done" and result.tool_calls == []
    assert "the sandbox worker sent an invalid frame" in told(root, 1)
