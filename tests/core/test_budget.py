import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.budget import Budget, BudgetExhausted, Limits
from rlm_adapters.core.pricing import PriceTable, register_price


@pytest.mark.parametrize("name", ["max_root_tokens", "max_sub_tokens"])
def test_token_limit_below_minimum_is_a_value_error_naming_the_parameter(name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name}=49 is below the minimum of 50"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), **{name: 49})


def test_default_limits_are_one_million_tokens() -> None:
    limits = RLM(backend=ScriptedModel(["FINAL(x)"])).limits
    assert (limits.max_root_tokens, limits.max_sub_tokens) == (1_000_000, 1_000_000)


def test_reservations_hold_under_concurrency() -> None:
    budget = Budget(Limits(max_root_tokens=1000, max_sub_tokens=100))
    budget.reserve("sub", 60)
    with pytest.raises(BudgetExhausted, match="max_sub_tokens=100"):
        budget.reserve("sub", 60)  # the first call is still in flight
    assert budget.exhausted is not None and budget.exhausted.finish_reason == "budget"


def test_commit_records_usage_and_cost_once() -> None:
    budget = Budget(Limits(), PriceTable({"m": (1.0, 2.0)}))
    reserved = budget.reserve("sub", 10)
    cost = budget.commit("sub", "m", reserved, 1_000_000, 500_000)
    assert cost == pytest.approx(2.0)
    assert budget.usage.to_dict()["sub"] == {
        "calls": 1,
        "input_tokens": 1_000_000,
        "output_tokens": 500_000,
        "cost": 2.0,
    }
    assert budget.usage.by_model["m"].calls == 1


def test_cost_cap_stops_the_next_call() -> None:
    budget = Budget(Limits(max_cost=0.5), PriceTable({"m": (1.0, 1.0)}))
    budget.commit("root", "m", budget.reserve("root", 1), 600_000, 0)
    with pytest.raises(BudgetExhausted, match=r"max_cost=0\.5"):
        budget.reserve("sub", 1)


def test_time_limit_uses_the_clock() -> None:
    now = [0.0]
    budget = Budget(Limits(timeout=10), clock=lambda: now[0])
    budget.reserve("root", 1)
    now[0] = 11
    with pytest.raises(BudgetExhausted) as info:
        budget.reserve("root", 1)
    assert info.value.finish_reason == "timeout"


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
