import asyncio

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.engine.budget import Budget, BudgetExhausted, Limits
from rlm_adapters.core.events import BudgetEvent, Event, RunFinished, RunStarted
from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.pricing import PriceTable, register_price
from rlm_adapters.testing import by_turn


@pytest.mark.parametrize("name", ["max_root_tokens", "max_sub_tokens"])
def test_token_limit_below_minimum_is_a_value_error_naming_the_parameter(name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name}=49 is below the minimum of 50"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), **{name: 49})


def test_default_limits_are_one_million_tokens() -> None:
    limits = RLM(backend=ScriptedModel(["FINAL(x)"])).limits
    assert (limits.max_root_tokens, limits.max_sub_tokens) == (1_000_000, 1_000_000)


async def test_a_call_that_fits_only_after_the_calls_in_flight_waits_for_them() -> None:
    budget = Budget(Limits(max_root_tokens=1000, max_sub_tokens=100))
    first = await budget.reserve("sub", "m", 40, 20)
    waiting = asyncio.ensure_future(budget.reserve("sub", "m", 40, 20))
    await asyncio.sleep(0)
    assert not waiting.done()  # 60 + 60 would pass 100 while the first call is in flight
    budget.settle(first, "m", 40, 10)
    second = await waiting
    assert second.tokens == 50  # its output hold is cut to what is left: 100 - 50 used - 40 input
    with pytest.raises(BudgetExhausted, match="max_sub_tokens=100") as info:
        budget.settle(second, "m", 40, 20)
        await budget.reserve("sub", "m", 40, 20)
    assert (info.value.used, info.value.limit) == (110, 100)
    assert budget.exhausted is info.value and info.value.finish_reason == "budget"


async def test_settle_records_usage_and_cost_once() -> None:
    budget = Budget(Limits(), PriceTable({"m": (1.0, 2.0)}))
    reservation = await budget.reserve("sub", "m", 10, None)
    cost, warnings = budget.settle(reservation, "m", 1_000_000, 500_000)
    assert cost == pytest.approx(2.0) and [w.resource for w in warnings] == ["sub_tokens"]
    assert budget.usage.to_dict()["sub"] == {
        "calls": 1,
        "input_tokens": 1_000_000,
        "output_tokens": 500_000,
        "cost": 2.0,
    }
    assert budget.usage.by_model["m"].calls == 1


async def test_the_cost_of_calls_in_flight_is_held() -> None:
    budget = Budget(Limits(max_cost=0.5), PriceTable({"m": (1.0, 1.0)}))
    first = await budget.reserve("sub", "m", 1_000, 300_000)
    assert first.cost == pytest.approx(0.301)
    second = asyncio.ensure_future(budget.reserve("sub", "m", 1_000, 300_000))
    await asyncio.sleep(0)
    assert not second.done()  # two holds of $0.301 would pass $0.50
    budget.settle(first, "m", 1_000, 300_000)
    held = await second
    assert held.cost == pytest.approx(0.199)  # cut to what is left of the cap
    budget.settle(held, "m", 1_000, 300_000)
    with pytest.raises(BudgetExhausted, match=r"max_cost=0\.5") as info:
        await budget.reserve("sub", "m", 1_000, 300_000)
    assert info.value.used == pytest.approx(0.602) and info.value.limit == 0.5


async def test_warnings_are_returned_once_per_resource() -> None:
    budget = Budget(Limits(max_root_tokens=1000))
    _, warnings = budget.settle(await budget.reserve("root", "m", 10, 10), "m", 700, 150)
    assert [(w.resource, w.used, w.limit) for w in warnings] == [("root_tokens", 850.0, 1000.0)]
    _, again = budget.settle(await budget.reserve("root", "m", 10, 10), "m", 10, 10)
    assert again == []


async def test_a_provider_reporting_negative_tokens_is_not_a_refund() -> None:
    budget = Budget(Limits(max_sub_tokens=100))
    budget.settle(await budget.reserve("sub", "m", 10, 10), "m", 90, 5)
    budget.settle(await budget.reserve("sub", "m", 1, 1), "m", -1_000, -1_000)
    assert budget.usage.sub.total_tokens == 95


async def test_sub_calls_are_counted_and_capped() -> None:
    budget = Budget(Limits(max_sub_calls=2))
    await budget.start_sub_call()
    await budget.start_sub_call()
    with pytest.raises(BudgetExhausted, match="max_sub_calls=2") as info:
        await budget.start_sub_call()
    assert (info.value.used, info.value.limit) == (2, 2)


async def test_time_limit_uses_the_clock() -> None:
    now = [0.0]
    budget = Budget(Limits(timeout=10), clock=lambda: now[0])
    await budget.reserve("root", "m", 1, 1)
    now[0] = 11
    with pytest.raises(BudgetExhausted) as info:
        await budget.reserve("root", "m", 1, 1)
    assert info.value.finish_reason == "timeout" and info.value.limit == 10


def test_price_lookup_falls_back_to_dated_prefix_and_registration() -> None:
    table = PriceTable()
    assert table.price("gpt-5-mini-2025-08-07") == table.price("gpt-5-mini")
    assert table.price("unknown-model") is None
    register_price("my-local-model", 0.1, 0.2)
    assert PriceTable().price("my-local-model") == (0.1, 0.2)
    with pytest.raises(ValueError, match="prices must be >= 0"):
        register_price("bad", -1, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_cost": 0}, "max_cost=0 must be > 0"),
        ({"timeout": -1}, "timeout=-1 must be > 0"),
        ({"max_depth": -1}, "max_depth=-1 must be an integer >= 0"),
        ({"max_iterations": 0}, "max_iterations=0 must be an integer >= 1"),
        ({"max_concurrency": 0}, "max_concurrency=0 must be an integer >= 1"),
    ],
)
def test_other_limits_are_validated(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RLM(backend=ScriptedModel(["FINAL(x)"]), **kwargs)  # type: ignore[arg-type]


async def test_a_warning_is_an_awaited_event_of_the_run_that_caused_it() -> None:
    root = by_turn("```repl\nprint(rlm_query('task', model='sub'))\n```", "FINAL(done)")

    nested = ScriptedModel([LMResponse("FINAL(nested)", 800, 50, "sub")], model_name="sub")
    events: list[Event] = []
    rlm = RLM(backend=root, other_backends=[nested], environment="local", max_depth=2, max_sub_tokens=1000)
    result = await rlm.acompletion("context", "q", callbacks=[events.append])
    assert result.finish_reason == "final"
    nested_run = next(e for e in events if isinstance(e, RunStarted) and e.depth == 1)
    warning = next(e for e in events if isinstance(e, BudgetEvent))
    assert (warning.run_id, warning.depth, warning.parent_run_id) == (nested_run.run_id, 1, result.run_id)
    assert (warning.resource, warning.used, warning.limit, warning.exhausted) == ("sub_tokens", 850, 1000, False)
    # Emitted in order: before the nested run finished, not whenever a fire-and-forget task ran.
    finished = next(i for i, e in enumerate(events) if isinstance(e, RunFinished) and e.depth == 1)
    assert events.index(warning) < finished


async def test_running_out_reports_the_real_figures() -> None:
    root = ScriptedModel([LMResponse("thinking", 900, 50, "scripted")])
    events: list[Event] = []
    result = await RLM(backend=root, environment="local", max_root_tokens=1000).acompletion(
        "context", "q", callbacks=[events.append]
    )
    assert result.finish_reason == "budget"
    exhausted = next(e for e in events if isinstance(e, BudgetEvent) and e.exhausted)
    assert (exhausted.resource, exhausted.used, exhausted.limit) == ("root_tokens", 950, 1000)


async def test_float_drift_in_held_costs_cannot_make_a_call_wait_forever() -> None:
    budget = Budget(Limits(max_cost=0.3), PriceTable({"m": (1.0, 1.0)}))
    for _ in range(10):  # 0.1 + 0.2 - 0.1 - 0.2 is not 0.0 in floats
        first, second = await budget.reserve("sub", "m", 100_000, 0), await budget.reserve("sub", "m", 200_000, 0)
        budget.release(first)
        budget.release(second)
    held = await asyncio.wait_for(budget.reserve("sub", "m", 100_000, 10_000_000), 5)
    assert held.cost == pytest.approx(0.3)
