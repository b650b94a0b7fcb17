"""Budget attacks played by a root model: batches that try to spend past a limit, nested runs that try to
start more sandboxes than the run tree allows (issue 12, item 5)."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.events import CellExecuted, Event, RunFinished, RunStarted
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox
from rlm_adapters.testing import by_turn, turn_of

ENVIRONMENTS = ["subprocess", "local"]
LONG_REPLY = "x" * 2000  # about 500 output tokens


def _play(code: str) -> ScriptedModel:
    return by_turn(f"```repl\n{code}\n```", "FINAL(done)")


def _cell_output(events: list[Event]) -> str:
    return "\n".join(e.output for e in events if isinstance(e, CellExecuted) and e.depth == 0)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_a_batch_of_200_cannot_spend_past_max_sub_tokens(environment: str) -> None:
    code = (
        "answers = llm_query_batched([f'q{i}' for i in range(200)])\n"
        "print('answered', sum(not a.startswith('Error') for a in answers))\n"
        "print('refused', sum(a.startswith('Error: budget spent') for a in answers))"
    )
    sub = ScriptedModel([LONG_REPLY], model_name="sub", latency=0.01)
    events: list[Event] = []
    rlm = RLM(backend=_play(code), other_backends=[sub], environment=environment, max_sub_tokens=1000)
    result = await rlm.acompletion("context", "question", callbacks=[events.append])
    # The limit may be passed by the part of one reply beyond what was left; never by 100k tokens.
    assert result.usage_summary.sub.total_tokens <= 1000 + 510
    assert len(sub.calls) == 2
    assert result.finish_reason == "budget"
    assert "answered 2" in _cell_output(events) and "refused 198" in _cell_output(events)


@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_a_batch_of_200_cannot_spend_past_max_cost(environment: str) -> None:
    code = "answers = llm_query_batched([f'q{i}' for i in range(200)])\nprint(answers[-1])"
    sub = ScriptedModel([LONG_REPLY], model_name="pricey", latency=0.01)  # $0.02 a call
    rlm = RLM(
        backend=_play(code),
        other_backends=[sub],
        environment=environment,
        max_cost=0.01,
        prices={"pricey": (10.0, 40.0)},
    )
    result = await rlm.acompletion("context", "question")
    assert result.usage_summary.total_cost <= 0.01 + 0.0201  # at most one reply past the cap
    assert len(sub.calls) == 1
    assert result.finish_reason == "budget" and "max_cost=0.01" in (result.error or "")


@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_rlm_query_batched_150_starts_no_sandbox_past_max_sub_calls(
    environment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[int] = []
    original = SubprocessSandbox.start

    async def counted(self: SubprocessSandbox, setup: Any) -> None:
        starts.append(1)
        await original(self, setup)

    monkeypatch.setattr(SubprocessSandbox, "start", counted)
    code = (
        "answers = rlm_query_batched([f'task {i}' for i in range(150)], model='sub')\n"
        "print('refused', sum('max_sub_calls=3' in a for a in answers))"
    )
    nested_root = ScriptedModel(["FINAL(nested answer)"], model_name="sub")
    events: list[Event] = []
    rlm = RLM(
        backend=_play(code),
        other_backends=[nested_root],
        environment=environment,
        max_depth=2,
        max_sub_calls=3,
    )
    result = await rlm.acompletion("context", "question", callbacks=[events.append])
    nested_runs = [e for e in events if isinstance(e, RunStarted) and e.depth == 1]
    assert len(nested_runs) == 3  # each nested run starts a sandbox: none past the budget
    assert len(starts) == (4 if environment == "subprocess" else 0)  # the top-level worker and three nested
    assert "refused 147" in _cell_output(events)
    assert result.finish_reason == "budget"


@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_nested_runs_wait_for_a_free_sandbox(environment: str) -> None:
    code = "answers = rlm_query_batched([f'task {i}' for i in range(6)], model='sub')\nprint(answers)"
    nested_root = ScriptedModel(["FINAL(nested answer)"], model_name="sub", latency=0.05)
    running: set[str] = set()
    peak = [0]

    def track(event: Event) -> None:
        if event.depth == 1 and isinstance(event, RunStarted):
            running.add(event.run_id)
            peak[0] = max(peak[0], len(running))
        elif event.depth == 1 and isinstance(event, RunFinished):
            running.discard(event.run_id)

    events: list[Event] = []
    rlm = RLM(
        backend=_play(code),
        other_backends=[nested_root],
        environment=environment,
        max_depth=2,
        max_sandboxes=3,
    )
    result = await rlm.acompletion("context", "question", callbacks=[track, events.append])
    assert result.finish_reason == "final"
    assert peak[0] == 2  # the top-level run holds the third sandbox
    assert _cell_output(events).count("nested answer") == 6


async def test_waiting_for_sandboxes_cannot_deadlock_across_depths() -> None:
    """Every level waits only for deeper ones, so three levels finish with three sandboxes."""

    def nested(messages: list[Message]) -> str:
        first = messages[1]["content"]
        turn = turn_of(messages)
        if "outer" in first and turn == 0:
            return "```repl\nprint(rlm_query_batched(['inner a', 'inner b'], model='sub'))\n```"
        return "FINAL(leaf)"

    code = "print(rlm_query_batched(['outer 1', 'outer 2', 'outer 3'], model='sub'))"
    events: list[Event] = []
    rlm = RLM(
        backend=_play(code),
        other_backends=[ScriptedModel(nested, model_name="sub")],
        environment="local",
        max_depth=3,
        max_sandboxes=3,
        timeout=60,
    )
    result = await rlm.acompletion("context", "question", callbacks=[events.append])
    assert result.finish_reason == "final"
    assert sum(isinstance(e, RunStarted) and e.depth == 2 for e in events) == 6
