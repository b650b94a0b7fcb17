"""`on_budget`: a limit about to stop the run asks, and the run goes on from where it was when raised."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from rlm_adapters import RLM, ConfigurationError, Event, ScriptedModel, testing
from rlm_adapters.core.engine.budget import Budget, BudgetExhausted, Limits
from rlm_adapters.core.pricing import PriceTable

BATCH = "```repl\nparts = llm_query_batched([f'piece {i}' for i in range(8)])\nprint(parts)\n```"


def by_turn(*replies: str) -> ScriptedModel:
    return testing.by_turn(*replies, model_name="root")


class Hook:
    """Records its questions and answers with the next of `answers`."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, float, float]] = []

    async def __call__(self, name: str, used: float, limit: float) -> Any:
        self.asked.append((name, used, limit))
        await asyncio.sleep(0.01)  # the other calls of the batch reach the limit meanwhile
        return self.answers.pop(0) if self.answers else None


def run(hook: Any, *replies: str, **kwargs: Any) -> tuple[Any, list[Event], ScriptedModel]:
    leaf = ScriptedModel(lambda m: f"read {m[-1]['content']}", model_name="leaf", latency=0.01)
    events: list[Event] = []
    rlm = RLM(backend=by_turn(*replies), other_backends=[leaf], environment="local", on_budget=hook, **kwargs)
    return rlm.completion("ctx", "q", callbacks=[events.append]), events, leaf


def test_a_raised_sub_call_cap_lets_the_whole_batch_through_and_asks_once() -> None:
    hook = Hook(20)
    result, events, leaf = run(hook, BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "final" and result.response == "done"
    assert hook.asked == [("max_sub_calls", 3, 3)]  # eight calls, four past the cap at once: one question
    assert len(leaf.calls) == 8
    cells = [e for e in events if e.kind == "cell"]
    assert len(cells) == 1 and "Error" not in cells[0].output and "read piece 7" in cells[0].output
    assert result.metadata["limits_raised"] == [{"limit": "max_sub_calls", "used": 3, "from": 3, "to": 20}]


def test_declining_ends_the_run_as_without_a_hook() -> None:
    hook = Hook(None)
    result, events, leaf = run(hook, BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "budget" and result.metadata["limit"] == "sub_calls"
    assert len(hook.asked) == 1 and len(leaf.calls) == 3
    cell = next(e for e in events if e.kind == "cell")
    assert cell.output.count("budget spent") == 5
    assert "limits_raised" not in result.metadata


def test_a_plain_function_may_answer_and_token_limits_are_raisable() -> None:
    asked: list[tuple[str, float, float]] = []

    def hook(name: str, used: float, limit: float) -> int:
        asked.append((name, used, limit))
        return int(limit * 10)

    long_batch = BATCH.replace("f'piece {i}'", "f'piece {i} ' + 'x' * 200")  # about 50 tokens each
    result, _events, leaf = run(hook, long_batch, "FINAL(done)", max_sub_tokens=120)
    assert result.finish_reason == "final" and len(leaf.calls) == 8
    assert asked and all(name == "max_sub_tokens" for name, _u, _l in asked)


def test_max_cost_is_raisable_and_the_hook_sees_what_was_spent() -> None:
    hook = Hook(1_000.0)
    prices = {"leaf": (1_000_000.0, 0.0), "root": (0.0, 0.0)}  # each sub-call costs about $2
    result, _events, leaf = run(hook, BATCH, "FINAL(done)", max_cost=5.0, prices=prices)
    assert result.finish_reason == "final" and len(leaf.calls) == 8
    name, used, limit = hook.asked[0]
    assert (name, limit) == ("max_cost", 5.0) and 0 < used <= 5.0
    assert result.usage_summary.total_cost > 5.0


def test_the_top_level_run_may_be_given_more_turns_and_is_told_so() -> None:
    hook = Hook(4)
    root = by_turn("```repl\nprint(1)\n```", "```repl\nprint(2)\n```", "```repl\nprint(3)\n```", "FINAL(late)")
    rlm = RLM(backend=root, environment="local", max_iterations=2, on_budget=hook)
    result = rlm.completion("ctx", "q")
    assert (result.response, result.finish_reason, result.iterations) == ("late", "final", 4)
    assert hook.asked == [("max_iterations", 2, 2)]
    # The turn that reached the limit already says how many turns there are now.
    assert "Turn 2 of 4 done (2 left)" in root.calls[2][-1]["content"]


@pytest.mark.parametrize("answer", [2, 1.5, True, "lots", float("nan"), -4])
def test_an_answer_that_is_not_a_number_above_the_limit_ends_the_run_and_is_logged(
    answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.budget"):
        result, _events, _leaf = run(Hook(answer), BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "budget"
    assert "not a number above the limit 3" in caplog.text


def test_a_hook_that_fails_declines_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(name: str, used: float, limit: float) -> float:
        raise RuntimeError("the dialog crashed")

    with caplog.at_level(logging.WARNING, logger="rlm_adapters.budget"):
        result, _events, _leaf = run(broken, BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "budget" and "the dialog crashed" in caplog.text


def test_timeout_is_not_raisable() -> None:
    hook = Hook(100.0)
    slow = ScriptedModel(lambda m: "```repl\nprint(1)\n```", model_name="root", latency=0.3)
    result = RLM(backend=slow, environment="local", timeout=0.5, on_budget=hook).completion("ctx", "q")
    assert result.finish_reason == "timeout" and hook.asked == []


def test_a_run_s_own_hook_replaces_the_rlm_s() -> None:
    own, default = Hook(20), Hook(None)
    leaf = ScriptedModel(lambda m: "ok", model_name="leaf")
    rlm = RLM(backend=by_turn(BATCH, "FINAL(done)"), other_backends=[leaf], environment="local", max_sub_calls=3,
              on_budget=default)  # fmt: skip
    result = asyncio.run(rlm.acompletion("ctx", "q", on_budget=own))
    assert result.finish_reason == "final" and own.asked and not default.asked
    assert result.metadata["limits_raised"][0]["to"] == 20


def test_on_budget_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match="on_budget=5 must be a function"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), on_budget=5)


async def test_calls_waiting_on_a_question_go_on_when_it_is_raised_and_fail_together_when_not() -> None:
    for answer, expected in ((500, "raised"), (None, "refused")):
        hook = Hook(answer)
        budget = Budget(Limits(max_sub_tokens=100), PriceTable(), on_budget=hook)
        first = await budget.reserve("sub", "m", 10, 10)
        budget.settle(first, "m", 95, 0)

        async def one(budget: Budget) -> str:
            try:
                held = await budget.reserve("sub", "m", 10, 10)
            except BudgetExhausted:
                return "refused"
            budget.settle(held, "m", 10, 0)
            return "raised"

        outcomes = await asyncio.gather(*(one(budget) for _ in range(6)))
        assert outcomes == [expected] * 6 and len(hook.asked) == 1
        assert hook.asked[0] == ("max_sub_tokens", 95, 100)
        if answer is None:
            assert budget.exhausted is not None and budget.exhausted.resource == "sub_tokens"


def test_a_hook_that_never_answers_cannot_outlast_the_runs_timeout(caplog: pytest.LogCaptureFixture) -> None:
    async def never(name: str, used: float, limit: float) -> float:
        await asyncio.Event().wait()
        return 0.0

    with caplog.at_level(logging.WARNING, logger="rlm_adapters.budget"):
        result, _events, _leaf = run(never, BATCH, "FINAL(done)", max_sub_calls=3, timeout=1.5)
    assert result.finish_reason == "timeout" and "no answer" in caplog.text


def test_a_runs_hook_is_checked_on_every_way_in() -> None:
    rlm = RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local")
    with pytest.raises(ConfigurationError, match="on_budget='ask me' must be a function"):
        rlm.completion("ctx", "q", on_budget="ask me")
    session = RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local", persistent=True)
    with session, pytest.raises(ConfigurationError, match="on_budget=3 must be a function"):
        session.completion("ctx", "q", on_budget=3)


def test_a_plain_hook_blocked_on_nobody_cannot_hold_the_run_past_its_timeout(caplog: pytest.LogCaptureFixture) -> None:
    answer_now = threading.Event()
    answered: list[float] = []

    def waits_for_a_person(name: str, used: float, limit: float) -> float:
        answer_now.wait(60)  # input() on a terminal nobody watches
        answered.append(limit)
        return limit * 10

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.budget"):
        result, _events, leaf = run(waits_for_a_person, BATCH, "FINAL(done)", max_sub_calls=3, timeout=1.5)
    took = time.monotonic() - started
    answer_now.set()
    assert result.finish_reason == "timeout" and "no answer" in caplog.text
    assert took < 10, f"completion() returned {took:.1f} s after a 1.5 s timeout: it waited for the hook"
    assert len(leaf.calls) == 3


def test_a_hook_that_raises_cancelled_declines_and_keeps_the_replies_already_paid() -> None:
    async def cancels(name: str, used: float, limit: float) -> float:
        raise asyncio.CancelledError

    result, events, leaf = run(cancels, BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "budget" and len(leaf.calls) == 3
    cell = next(e for e in events if e.kind == "cell")
    assert cell.output.count("read piece") == 3 and "cancelled" not in cell.output.replace("CancelledError", "")


@pytest.mark.parametrize(
    "answer", [10**400, float("inf"), [50], {"limit": 50}, object()], ids=["huge int", "inf", "list", "dict", "object"]
)
def test_a_nonsense_answer_ends_the_run_in_one_short_line(answer: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.budget"):
        result, events, leaf = run(Hook(answer), BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "budget" and len(leaf.calls) == 3
    (line,) = [r.getMessage() for r in caplog.records if r.name == "rlm_adapters.budget"]
    assert "not a number above the limit 3" in line and len(line) < 200
    cell = next(e for e in events if e.kind == "cell")
    assert "Error: budget spent" in cell.output and "too large" not in cell.output


def test_a_plain_hook_may_hand_back_an_awaitable_answer() -> None:
    def later(name: str, used: float, limit: float) -> Any:
        async def answer() -> int:
            return 20

        return answer()

    result, _events, leaf = run(later, BATCH, "FINAL(done)", max_sub_calls=3)
    assert result.finish_reason == "final" and len(leaf.calls) == 8
