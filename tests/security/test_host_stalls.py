"""One frame must not freeze the host (issue 24, defect 1), played by a root model at every sandbox level.

Model code writes a forged ``call`` frame straight to the worker's frame stream (fd 3): a tool call whose
argument is a tagged dict of 60,000 integer keys that all hash alike (``k * (2**61 - 1)``), about 1.5 MB of
JSON, which the host used to decode on its event loop before looking at the tool's name (25 s of a frozen
loop, quadratic in the key count). The same with float keys mixed in, nested tuples, a set, and frames the
JSON parser itself would chew on for seconds. Each must leave the host's loop free (a probe task measures
its longest stall) and end as a failed call for model code, within the run's timeout.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.events import CellExecuted, Event
from rlm_adapters.core.lm.base import Message
from tests.core.sandbox.helpers import StallProbe
from tests.security.levels import RUN_LEVELS, environment_at
from tests.security.test_host_trust import RAW  # a raw frame body written to fd 3, then a pause

RUN_TIMEOUT = 60.0

# Values built inside the sandbox, as model code would (TAG is the codec's tag key).
VALUES = {
    "int-keys": "{TAG: 'dict', 'items': [[k * P, 0] for k in range(60_000)]}",
    # Integral floats hash as the integer they equal: 2.0 ** (61 * j) and 1 + k * P all hash to 1.
    "float-keys": "{TAG: 'dict', 'items': [[2.0 ** (61 * j), 0] for j in range(-17, 17)] + "
    "[[1 + k * P, 0] for k in range(60_000)]}",
    "nested-tuple-keys": "{TAG: 'dict', 'items': [[{TAG: 'tuple', 'items': [{TAG: 'tuple', 'items': [k * P]}]}, 0] "
    "for k in range(30_000)]}",
    "set": "{TAG: 'set', 'items': [k * P for k in range(60_000)]}",
}

FORGE = """\
import json, os, struct
P, TAG = 2**61 - 1, '__rlm_type__'
value = {value}
body = json.dumps({{'type': 'call', 'id': 90_001, 'kind': 'tool',
                   'args': {{'name': {name!r}, 'args': [value], 'kwargs': {{}}}}}}).encode()
os.write(3, struct.pack('>I', len(body)) + body)  # the worker ignores the host's reply to an id it never used
print('forged', len(body))
channel = llm_query.__self__._call.__self__  # the worker's own channel: the reply comes back to model code
try:
    channel.call('tool', {{'name': {name!r}, 'args': [value], 'kwargs': {{}}}})
    print('decoded?!')
except Exception as exc:
    print('refused:', exc)
"""


def _turns(code: str) -> Any:
    def reply(messages: list[Message]) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        return f"```repl\n{code}\n```" if turn == 0 else "FINAL(done)"

    return reply


def lookup(key: Any) -> str:
    """A custom tool, so that the forged call's name is a real one and its arguments must be decoded."""
    return "looked up"


async def _run_attack(code: str, options: dict[str, Any]) -> tuple[Any, list[CellExecuted]]:
    """Play `code` in a run; the host's loop must never stall, and the run end within its timeout."""
    events: list[Event] = []
    rlm = RLM(backend=ScriptedModel(_turns(code)), custom_tools={"lookup": lookup}, timeout=RUN_TIMEOUT, **options)
    started = time.monotonic()
    async with StallProbe() as probe:
        result = await rlm.acompletion("context", "question", callbacks=[events.append])
    probe.check()
    assert time.monotonic() - started < RUN_TIMEOUT
    return result, [e for e in events if isinstance(e, CellExecuted)]


@pytest.mark.parametrize("kind", RUN_LEVELS)
@pytest.mark.parametrize("value", sorted(VALUES))
async def test_a_hash_collision_flood_in_tool_arguments_never_stalls_the_host(
    kind: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, cells = await _run_attack(
        FORGE.format(value=VALUES[value], name="lookup"), environment_at(kind, monkeypatch)
    )
    assert (result.finish_reason, result.response) == ("final", "done")
    (cell,) = cells
    assert cell.error is None and not cell.variables_lost, cell.error
    assert "refused: tool 'lookup': its arguments were refused" in cell.output
    assert "(limit: max_equal_hashes)" in cell.output


@pytest.mark.parametrize("kind", RUN_LEVELS)
async def test_a_tool_call_of_an_unknown_name_is_refused_before_its_arguments_are_read(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact repro: no custom tool is needed, the host decoded before it looked the name up."""
    code = FORGE.format(value=VALUES["int-keys"], name="no_such_tool")
    result, cells = await _run_attack(code, environment_at(kind, monkeypatch))
    (cell,) = cells
    assert "refused: no tool named 'no_such_tool' in this run" in cell.output
    assert result.finish_reason == "final"


# Frames whose JSON alone costs a parser seconds (empty lists: 4 s per 64 MB; long integers: 19 s per
# 512 MB), here 15-20 MB (about a second each): refused unparsed, the cell ends, the run goes on.
HEAD = 'b\'{"type": "call", "id": 7, "kind": "tool", "args": [\''
HEAVY_BODIES = {
    "millions-of-empty-lists": HEAD + " + b'[],' * 5_000_000 + b'[]]}'",
    "long-integers": HEAD + " + b','.join([b'9' * 4000] * 5000) + b']}'",
}


@pytest.mark.parametrize("kind", RUN_LEVELS)
@pytest.mark.parametrize("name", sorted(HEAVY_BODIES))
async def test_a_frame_too_costly_to_parse_is_refused_unparsed(
    kind: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, cells = await _run_attack(RAW.format(body=HEAVY_BODIES[name]), environment_at(kind, monkeypatch))
    assert result.finish_reason == "final"
    (cell,) = cells
    assert "sent an invalid frame" in (cell.error or "") and cell.variables_lost
    assert ("more than 1,000,000 JSON values" if "lists" in name else "too many digits") in (cell.error or "")
