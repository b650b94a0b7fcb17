"""Port of the reference's limit checks (tests/test_depth_metadata.py::TestDepth1LimitChecks,
tests/test_subcall.py's propagation cases): our default returns a `finish_reason`; with
``raise_on_budget=True`` the reference's exceptions are raised, with its attributes."""

from __future__ import annotations

import asyncio

import pytest

from rlm_adapters import (
    BudgetExceededError,
    CancellationError,
    ErrorThresholdExceededError,
    Message,
    RLMError,
    ScriptedModel,
    TimeoutExceededError,
    TokenLimitExceededError,
)
from rlm_adapters.core.lm.scripted import Reply

from .helpers import by_turn, final, make

ERROR_CELL = "Thinking: 7\n```repl\n1 / 0\n```"


def test_the_reference_exceptions_are_ours() -> None:
    for cls in (TimeoutExceededError, TokenLimitExceededError, ErrorThresholdExceededError, CancellationError):
        assert issubclass(cls, BudgetExceededError) and issubclass(cls, RLMError)


def test_timeout_returns_a_finish_reason_by_default_and_raises_when_asked() -> None:
    async def slow(messages: list[Message]) -> Reply:
        await asyncio.sleep(0.3)
        return "Partial: 5\n```repl\nprint(1)\n```"

    result = make(ScriptedModel(slow, model_name="m"), max_timeout=0.5).completion("c")
    assert result.finish_reason == "timeout" and result.response == "Partial: 5"
    with pytest.raises(TimeoutExceededError) as caught:
        make(ScriptedModel(slow, model_name="m"), max_timeout=0.5, raise_on_budget=True).completion("c")
    assert caught.value.timeout == 0.5 and caught.value.elapsed >= 0.5
    assert caught.value.partial_answer == "Partial: 5"


def test_error_threshold() -> None:
    result = make(by_turn(ERROR_CELL), max_errors=2).completion("c")
    assert (result.finish_reason, result.iterations, result.metadata["limit"]) == ("error", 2, "max_errors")
    assert "ZeroDivisionError" in (result.error or "")
    with pytest.raises(ErrorThresholdExceededError) as caught:
        make(by_turn(ERROR_CELL), max_errors=3, raise_on_budget=True).completion("c")
    assert (caught.value.error_count, caught.value.threshold) == (3, 3)
    assert "ZeroDivisionError" in (caught.value.last_error or "")
    assert caught.value.partial_answer == "Thinking: 7"


def test_error_count_resets_on_success() -> None:
    root = by_turn(ERROR_CELL, "```repl\nprint('ok')\n```", ERROR_CELL, final("made it"))
    result = make(root, max_errors=2).completion("c")
    assert (result.finish_reason, result.response) == ("final", "made it")


def test_budget_check_raises_with_spent_and_budget() -> None:
    root = by_turn("```repl\nprint('x' * 4000)\n```")
    # Cheap enough that the first calls fit (each holds its input and output cost before it leaves).
    prices = {"test-model": (50.0, 50.0)}
    result = make(root, max_budget=0.5, prices=prices).completion("c")
    assert result.finish_reason == "budget" and result.metadata["limit"] == "cost"
    with pytest.raises(BudgetExceededError) as caught:
        make(root, max_budget=0.5, prices=prices, raise_on_budget=True).completion("c")
    assert type(caught.value) is BudgetExceededError
    assert caught.value.budget == 0.5 and caught.value.spent == caught.value.result.cost > 0


def test_token_limit_raises_with_tokens_used_and_limit() -> None:
    root = by_turn("```repl\nprint('x' * 2000)\n```")
    result = make(root, max_tokens=600).completion("c")
    assert result.finish_reason == "budget" and result.metadata["limit"] == "max_tokens"
    assert result.iterations < 30
    with pytest.raises(TokenLimitExceededError) as caught:
        make(root, max_tokens=600, raise_on_budget=True).completion("c")
    assert caught.value.token_limit == 600 and caught.value.tokens_used > 600


def test_our_own_token_caps_raise_the_token_error_too() -> None:
    root = by_turn("```repl\nprint('x' * 9000)\n```")
    with pytest.raises(TokenLimitExceededError) as caught:
        make(root, max_root_tokens=2000, raise_on_budget=True).completion("c")
    assert caught.value.token_limit == 2000


def test_cancellation_raises_when_asked() -> None:
    async def main() -> None:
        cancel = asyncio.Event()

        async def slow(messages: list[Message]) -> Reply:
            cancel.set()
            await asyncio.sleep(5)
            return final("never")

        rlm = make(ScriptedModel(slow, model_name="m"), raise_on_budget=True)
        await rlm.acompletion("c", cancel_event=cancel)

    with pytest.raises(CancellationError):
        asyncio.run(main())


def test_limits_cover_nested_runs() -> None:
    """The reference hands children the remaining timeout and the same max_tokens; ours is one budget."""

    def model(messages: list[Message]) -> Reply:
        if "Child" in messages[1]["content"]:
            return "```repl\nprint('y' * 4000)\n```"
        return "```repl\nr = rlm_query('Child task', context='c')\n```"

    result = make(ScriptedModel(model, model_name="m"), max_depth=2, max_tokens=3000).completion("c")
    assert result.finish_reason == "budget" and result.usage_summary.total.total_tokens > 3000
