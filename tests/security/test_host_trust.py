"""The host trusts nothing the worker sends (issue 12, item 6), played by a root model through real runs.

Forged frames, a flood on stderr, huge exception texts, unencodable output and a worker that fails or dies
after FINAL must each end a cell (or the run) with a finish reason: never an exception out of
`acompletion`, a hang, a lost final answer or a log the size of the context.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, RLMLogger, ScriptedModel
from rlm_adapters.core.events import CellExecuted, Event
from rlm_adapters.core.trajectory import read_trajectory
from rlm_adapters.testing import by_turn

# fd 3 is the worker's protocol stream (a dup of its original stdout, made before anything else).
FORGE = (
    "import os, json, struct, time\n"
    "body = json.dumps({frame}).encode()\n"
    "os.write(3, struct.pack('>I', len(body)) + body)\n"
    "time.sleep(10)\n"
    "print('the forged frame was ignored')"
)
GOOD = {"output": "", "output_chars": 0, "error": None, "final": None, "variables": {}, "duration": 0.1}

FORGED_FRAMES: dict[str, dict[str, Any]] = {
    "output-not-a-string": {"type": "result", "id": 1, **GOOD, "output": 123},
    "output-chars-a-string": {"type": "result", "id": 1, **GOOD, "output_chars": "many"},
    "final-a-string": {"type": "result", "id": 1, **GOOD, "final": "forged answer"},
    "final-text-a-number": {"type": "result", "id": 1, **GOOD, "final": {"text": 5}},
    "variables-a-list": {"type": "result", "id": 1, **GOOD, "variables": [1, 2]},
    "variable-description-a-number": {"type": "result", "id": 1, **GOOD, "variables": {"x": 5}},
    "duration-a-string": {"type": "result", "id": 1, **GOOD, "duration": "slow"},
    "error-a-number": {"type": "result", "id": 1, **GOOD, "error": 42},
    "id-a-string": {"type": "result", "id": "1", **GOOD},
    "id-of-no-cell": {"type": "result", "id": 999, **GOOD},
    "id-missing": {"type": "result", **GOOD},
    "final-frame-for-no-cell": {"type": "final", "id": 999, "final": {"text": "forged answer", "value": None}},
    "second-ready": {"type": "ready", "ok": True},
    "ready-ok-a-string": {"type": "ready", "ok": "yes"},
    "call-id-a-string": {"type": "call", "id": "x", "kind": "llm_query", "args": {"prompt": "p"}},
    "call-args-a-list": {"type": "call", "id": 7, "kind": "llm_query", "args": ["p"]},
    "unknown-type": {"type": "bogus"},
}


def _repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def _cells(events: list[Event]) -> list[CellExecuted]:
    return [e for e in events if isinstance(e, CellExecuted)]


@pytest.mark.parametrize("name", sorted(FORGED_FRAMES))
async def test_a_forged_frame_ends_the_cell_and_keeps_the_run(name: str) -> None:
    frame = repr(FORGED_FRAMES[name])
    root = by_turn(_repl(FORGE.format(frame=frame)), _repl("print(len(context))"), "FINAL(done)")
    events: list[Event] = []
    rlm = RLM(backend=root, environment="subprocess", environment_kwargs={"cell_timeout": 30})
    result = await rlm.acompletion("the context text", "question", callbacks=[events.append])
    assert result.finish_reason == "final" and result.response == "done"
    first, second = _cells(events)
    assert "sent an invalid frame" in (first.error or "") and first.variables_lost
    assert "ignored" not in first.output
    assert second.output.strip() == "16" and second.error is None  # a fresh worker, context loaded


RAW_BODIES = {
    "nested-too-deep": "b'[' * 200_000",
    "not-utf8": "b'\\xff\\xfe{}'",
    "not-json": "b'{type: result}'",
    "not-an-object": "b'[1, 2, 3]'",
    "no-type": "b'{\"id\": 1}'",
    "integer-of-5000-digits": "b'{\"type\": \"result\", \"id\": ' + b'1' * 5000 + b'}'",
}
RAW = (
    "import os, struct, time\n"
    "body = {body}\n"
    "os.write(3, struct.pack('>I', len(body)) + body)\n"
    "time.sleep(10)\n"
    "print('the forged frame was ignored')"
)


@pytest.mark.parametrize("name", [*sorted(RAW_BODIES), "announced-1-GiB"])
async def test_a_frame_that_is_not_a_message_ends_the_cell_and_keeps_the_run(name: str) -> None:
    if name == "announced-1-GiB":
        code = "import os, struct, time\nos.write(3, struct.pack('>I', 1 << 30))\ntime.sleep(10)"
    else:
        code = RAW.format(body=RAW_BODIES[name])
    root = by_turn(_repl(code), _repl("print(len(context))"), "FINAL(done)")
    events: list[Event] = []
    rlm = RLM(backend=root, environment="subprocess", environment_kwargs={"cell_timeout": 30})
    result = await rlm.acompletion("the context text", "question", callbacks=[events.append])
    assert result.finish_reason == "final"
    first, second = _cells(events)
    assert "sent an invalid frame" in (first.error or "") and first.variables_lost
    assert second.output.strip() == "16"


async def test_a_flood_of_forged_calls_ends_the_cell() -> None:
    flood = (
        "import os, json, struct, time\n"
        "for i in range(1100):\n"
        "    body = json.dumps({'type': 'call', 'id': 10_000 + i, 'kind': 'llm_query', 'args': {'prompt': 'p'}})\n"
        "    os.write(3, struct.pack('>I', len(body)) + body.encode())\n"
        "time.sleep(20)"
    )
    root = by_turn(_repl(flood), "FINAL(done)")
    sub = ScriptedModel(["slow answer"], model_name="sub", latency=30)
    events: list[Event] = []
    rlm = RLM(backend=root, other_backends=[sub], environment="subprocess", timeout=120)
    result = await rlm.acompletion("context", "question", callbacks=[events.append])
    assert result.finish_reason == "final"
    (cell,) = _cells(events)
    assert "more than 1024 calls in flight" in (cell.error or "")


async def test_a_stderr_line_over_64_kib_blocks_nothing() -> None:
    flood = "import os\nos.write(2, b'x' * 300_000)\nos.write(2, b'y' * 2_000_000 + b'\\n')\nprint('wrote')"
    root = by_turn(_repl(flood), _repl(flood), "FINAL(done)")
    events: list[Event] = []
    rlm = RLM(backend=root, environment="subprocess", environment_kwargs={"cell_timeout": 10})
    result = await rlm.acompletion("context", "question", callbacks=[events.append])
    assert result.finish_reason == "final"
    assert [(c.output.strip(), c.timed_out) for c in _cells(events)] == [("wrote", False), ("wrote", False)]


@pytest.mark.parametrize("environment", ["subprocess", "local"])
async def test_an_exception_over_a_huge_context_is_capped_like_output(environment: str, tmp_path: Path) -> None:
    root = by_turn(_repl("{}[context]"), "FINAL(done)")
    rlm = RLM(backend=root, environment=environment, logger=RLMLogger(tmp_path))
    result = await rlm.acompletion("A" * 5_000_000, "question")
    assert result.finish_reason == "final"
    assert result.trajectory_file is not None and result.trajectory_file.stat().st_size < 200_000
    seen = root.calls[1][-1]["content"]
    assert "KeyError" in seen and len(seen) < 20_000


@pytest.mark.parametrize("environment", ["subprocess", "local"])
async def test_lone_surrogates_in_output_do_not_drop_log_events(environment: str, tmp_path: Path) -> None:
    root = by_turn(_repl("print('bad \\ud800 char')"), "FINAL(done)")
    rlm = RLM(backend=root, environment=environment, logger=RLMLogger(tmp_path))
    result = await rlm.acompletion("context", "question")
    assert result.finish_reason == "final" and result.trajectory_file is not None
    _, records = read_trajectory(result.trajectory_file)
    cells = [r for r in records if r.get("kind") == "cell"]
    # In-process, the log writes the surrogate escaped; out of process, the host cleans it off the frame.
    assert len(cells) == 1 and cells[0]["output"] in ("bad \ud800 char\n", "bad \\ud800 char\n")
    assert [r["kind"] for r in records][-1] == "final"


@pytest.mark.parametrize("environment", ["subprocess", "local"])
async def test_a_lone_surrogate_in_the_code_itself_is_a_named_error(environment: str) -> None:
    root = by_turn(_repl("x = 'bad \ud800 source'"), "FINAL(done)")  # a raw surrogate in the reply
    events: list[Event] = []
    result = await RLM(backend=root, environment=environment).acompletion("context", "q", callbacks=[events.append])
    assert result.finish_reason == "final"
    (cell,) = _cells(events)
    assert "could not be parsed: UnicodeEncodeError" in (cell.error or "") and not cell.variables_lost


async def test_lone_surrogates_in_a_final_answer_reach_the_caller_encodable() -> None:
    root = by_turn(_repl("FINAL('bad \\ud800 answer')"))
    result = await RLM(backend=root, environment="subprocess").acompletion("context", "question")
    assert result.response == "bad \\ud800 answer" and result.final_value == result.response
    result.response.encode("utf-8")  # e.g. an MCP server's JSON-RPC response


async def test_lone_surrogates_in_a_structured_final_value_reach_the_caller_encodable() -> None:
    code = "FINAL_VAR({'bad \\udfff key': ['x \\ud800', {'deep': '\\udbff'}], 'n': 3})"
    result = await RLM(backend=by_turn(_repl(code)), environment="subprocess").acompletion("c", "q")
    assert result.finish_reason == "final"
    assert result.final_value == {"bad \\udfff key": ["x \\ud800", {"deep": "\\udbff"}], "n": 3}
    json.dumps(result.final_value, ensure_ascii=False).encode("utf-8")  # e.g. ChatRLM's structured output


AFTER_FINAL = {
    "a-variable-whose-len-raises": (
        "class Bad(str):\n    def __len__(self):\n        raise RuntimeError('no len')\n"
        "x = Bad('v')\nFINAL('kept answer')"
    ),
    "a-tiny-recursion-limit": "import sys\nsys.setrecursionlimit(60)\nFINAL('kept answer')",
    "a-final-whose-str-raises": (
        "class Shy:\n    def __str__(self):\n        raise ValueError('no')\n"
        "    def __repr__(self):\n        return 'kept answer'\nFINAL(Shy())"
    ),
}


@pytest.mark.parametrize("environment", ["subprocess", "local"])
@pytest.mark.parametrize("name", sorted(AFTER_FINAL))
async def test_an_answer_given_survives_what_follows(environment: str, name: str) -> None:
    root = by_turn(_repl(AFTER_FINAL[name]), "FINAL(the model's later guess)")
    result = await RLM(backend=root, environment=environment).acompletion("context", "question")
    assert (result.finish_reason, result.response) == ("final", "kept answer")


SUBPROCESS_ONLY_AFTER_FINAL = {
    # Would end the test process itself under `local`, which protects nothing.
    "the-worker-exits-after-final": "import os\ntry:\n    FINAL('kept answer')\nfinally:\n    os._exit(3)",
    "the-worker-exits-after-answer-ready": (
        "import os\nanswer['content'] = 'kept answer'\nanswer['ready'] = True\nos._exit(3)"
    ),
    "the-worker-is-killed-after-final": (
        "import os, signal\ntry:\n    FINAL('kept answer')\nfinally:\n    os.kill(os.getpid(), signal.SIGKILL)"
    ),
    # 300 M characters: sent as text and as value, the old result frame passed the 512 MiB frame limit.
    "a-final-too-big-for-one-frame": "FINAL('x' * 300_000_000)",
    "the-cell-hangs-after-final": (
        "import time\ntry:\n    FINAL('kept answer')\nexcept BaseException:\n    pass\ntime.sleep(60)"
    ),
}


@pytest.mark.parametrize("name", sorted(SUBPROCESS_ONLY_AFTER_FINAL))
async def test_an_answer_given_survives_the_worker(name: str) -> None:
    root = by_turn(_repl(SUBPROCESS_ONLY_AFTER_FINAL[name]), "FINAL(the model's later guess)")
    # 3 s ends the hanging cell soon; making and sending 300 MB can take longer than that on a busy machine.
    cell_timeout = 60 if name == "a-final-too-big-for-one-frame" else 3
    rlm = RLM(backend=root, environment="subprocess", environment_kwargs={"cell_timeout": cell_timeout})
    result = await rlm.acompletion("context", "question")
    assert result.finish_reason == "final"
    if name == "a-final-too-big-for-one-frame":
        assert result.response.startswith("xxx") and result.response.endswith("of 300,000,000 characters]")
    else:
        assert result.response == "kept answer"
