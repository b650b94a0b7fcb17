"""The price table's prompt-cache rates: built in per provider, given by the user, and never undercounting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core import pricing
from rlm_adapters.core.lm import LMResponse
from rlm_adapters.core.pricing import PriceTable, register_price
from rlm_adapters.errors import ConfigurationError


@pytest.fixture(autouse=True)
def forget_registered() -> Iterator[None]:
    saved = dict(pricing._registered)
    yield
    pricing._registered.clear()
    pricing._registered.update(saved)


@pytest.mark.parametrize(
    ("model", "rates"),
    [
        ("claude-sonnet-4-5", (0.30, 3.75)),  # Anthropic: reads 0.1x, writes 1.25x the input price
        ("us.anthropic.claude-haiku-4-5-20251001-v1:0", (0.10, 1.25)),  # the same on Bedrock
        ("gpt-5-mini-2025-08-07", (0.025, 0.25)),  # OpenAI's listed cached-input price; writes cost plain input
        ("gpt-4o", (1.25, 2.5)),
        ("models/gemini-2.5-flash", (0.03, 0.30)),
        ("amazon.nova-pro-v1:0", (0.20, 0.80)),
    ],
)
def test_built_in_cache_rates(model: str, rates: tuple[float, float]) -> None:
    assert PriceTable().cache_price(model) == pytest.approx(rates)


def test_a_call_is_priced_by_its_parts() -> None:
    table = PriceTable()
    # claude-haiku-4-5: $1 in, $5 out; 1,000 prompt tokens of which 600 read and 300 written.
    cost = table.cost("claude-haiku-4-5", 1000, 100, cache_read_tokens=600, cache_write_tokens=300)
    assert cost == pytest.approx((100 * 1.0 + 600 * 0.1 + 300 * 1.25 + 100 * 5.0) / 1e6)
    assert table.cost("claude-haiku-4-5", 1000, 100) == pytest.approx((1000 * 1.0 + 100 * 5.0) / 1e6)
    # A provider claiming more cached tokens than prompt tokens is billed for what it claims, never less than 0.
    assert table.cost("claude-haiku-4-5", 10, 0, cache_read_tokens=50) == pytest.approx(50 * 0.1 / 1e6)


def test_a_price_pair_of_the_users_pays_the_input_price_for_cached_tokens() -> None:
    table = PriceTable({"my-model": (2.0, 8.0), "claude-haiku-4-5": (2.0, 10.0)})
    assert table.cache_price("my-model") == (2.0, 2.0)
    # Overriding a built-in price drops the built-in cache rates: they were a fraction of the old price.
    assert table.cache_price("claude-haiku-4-5") == (2.0, 2.0)
    assert PriceTable().cache_price("unknown-model") is None
    assert PriceTable().cost("unknown-model", 100, 10, cache_read_tokens=50) == 0.0


def test_four_numbers_give_cache_rates_to_a_run_and_to_the_process() -> None:
    table = PriceTable({"my-model": (2.0, 8.0, 0.2, 2.5)})
    assert table.price("my-model") == (2.0, 8.0) and table.cache_price("my-model") == (0.2, 2.5)
    register_price("other", 1.0, 4.0, cache_read_per_mtok=0.1)
    assert PriceTable().cache_price("other") == (0.1, 1.0)
    with pytest.raises(ValueError, match="prices must be >= 0"):
        register_price("bad", 1.0, 1.0, cache_write_per_mtok=-1)

    def reply(_messages: object) -> LMResponse:
        return LMResponse("FINAL(x)", 1000, 10, "my-model", cache_read_tokens=800)

    rlm = RLM(
        backend=ScriptedModel(reply, model_name="my-model"),
        environment="local",
        prices={"my-model": (2.0, 8.0, 0.2, 2.5)},
    )
    result = rlm.completion("c", "q")
    assert result.cost == pytest.approx((200 * 2.0 + 800 * 0.2 + 10 * 8.0) / 1e6)
    assert result.usage_summary.to_dict()["root"]["cache_read_tokens"] == 800


@pytest.mark.parametrize("bad", [(1.0, 2.0, 3.0), (1.0, -2.0, 0.1, 0.1), ("1", 2.0)])
def test_a_price_of_the_wrong_shape_is_refused_when_the_rlm_is_built(bad: tuple[object, ...]) -> None:
    with pytest.raises(ConfigurationError, match="two or four numbers >= 0"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local", prices={"m": bad})  # type: ignore[dict-item]


def test_a_run_without_cache_tokens_keeps_the_seeds_usage_shape() -> None:
    result = RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local").completion("c", "q")
    assert set(result.usage_summary.to_dict()["total"]) == {"calls", "input_tokens", "output_tokens", "cost"}


@pytest.mark.parametrize("bad", [10**400, -5, 1.5, "12", None])
def test_cache_counts_a_careless_client_reports_are_not_counts(bad: object) -> None:
    def reply(_messages: object) -> LMResponse:
        return LMResponse("FINAL(x)", 100, 10, "claude-haiku-4-5", cache_read_tokens=bad, cache_write_tokens=bad)  # type: ignore[arg-type]

    result = RLM(backend=ScriptedModel(reply, model_name="claude-haiku-4-5"), environment="local").completion("c", "q")
    assert result.finish_reason == "final"
    assert result.usage_summary.root.cache_read_tokens == 0 and result.cost == pytest.approx((100 + 50) / 1e6)
