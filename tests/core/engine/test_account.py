"""`account=`: the one seam through which a run's calls are held, settled and refused by who pays for them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rlm_adapters import RLM, Event, ScriptedModel, testing
from rlm_adapters.core import Account, AccountRefused

BATCH = "```repl\nparts = llm_query_batched([f'piece {i}' for i in range(4)])\nprint(parts)\n```"
PRICES = {"root": (1_000_000.0, 0.0), "leaf": (100_000.0, 0.0)}  # a dollar a root input token, a tenth a leaf's


class Ledger:
    """An in-memory account: holds against `budget`, and what each call settled."""

    def __init__(self, budget: float | None = None) -> None:
        self.budget = budget
        self.spent = 0.0
        self.holds: dict[int, float] = {}
        self.settled: list[tuple[str, int, int, float, bool]] = []
        self.released = 0
        self.flushed = 0
        self._next = 0

    @property
    def capped(self) -> bool:
        return self.budget is not None

    @property
    def name(self) -> str:
        return "key 'test'"

    async def hold(self, model: str, dollars: float) -> object:
        await asyncio.sleep(0)
        if self.budget is not None and self.spent + sum(self.holds.values()) + dollars > self.budget:
            raise AccountRefused(f"key 'test' has spent ${self.spent:.2f} of ${self.budget:.2f}", self.spent, 10.0)
        self._next += 1
        self.holds[self._next] = dollars
        return self._next

    def settle(
        self, hold: object, model: str, input_tokens: int, output_tokens: int, dollars: float, *, cut: bool
    ) -> None:
        self.holds.pop(hold, None)  # type: ignore[arg-type]
        self.spent += dollars
        self.settled.append((model, input_tokens, output_tokens, dollars, cut))

    def release(self, hold: object) -> None:
        self.holds.pop(hold, None)  # type: ignore[arg-type]
        self.released += 1

    async def flush(self) -> None:
        self.flushed += 1


def _rlm(*replies: str, **kwargs: Any) -> RLM:
    leaf = ScriptedModel(lambda m: f"read {m[-1]['content']}", model_name="leaf")
    root = testing.by_turn(*replies, model_name="root")
    return RLM(backend=root, other_backends=[leaf], environment="local", prices=PRICES, **kwargs)


def test_the_ledger_is_an_account() -> None:
    assert isinstance(Ledger(), Account)


def test_every_call_is_held_then_settled_with_what_it_cost_and_the_run_flushes_once() -> None:
    ledger = Ledger()
    result = _rlm(BATCH, "FINAL(done)").completion("ctx", "q", account=ledger)
    assert result.finish_reason == "final"
    assert [s[0] for s in ledger.settled].count("leaf") == 4 and [s[0] for s in ledger.settled].count("root") == 2
    assert abs(ledger.spent - result.usage_summary.total_cost) < 1e-9 and ledger.spent > 0
    assert ledger.holds == {} and ledger.flushed == 1
    assert not any(cut for *_rest, cut in ledger.settled)


def test_an_account_that_cannot_pay_ends_the_run_at_the_budget_with_its_partial_answer_and_asks_no_hook() -> None:
    asked: list[str] = []
    measured = Ledger()
    _rlm(BATCH, "FINAL(done)").completion("ctx", "q", account=measured)
    budget = measured.settled[0][3] * 1.5  # the first root call fits; the sub-calls and the second do not all
    ledger = Ledger(budget=budget)
    events: list[Event] = []
    result = _rlm(BATCH, "FINAL(done)", on_budget=lambda name, used, limit: asked.append(name)).completion(
        "ctx", "q", account=ledger, callbacks=[events.append]
    )
    assert result.finish_reason == "budget" and result.metadata["limit"] == "key_budget"
    assert "key 'test' has spent" in (result.error or "")
    assert asked == [], "a key's budget is not the caller's to raise"
    assert ledger.holds == {} and 0 < ledger.spent <= budget
    assert any(e.kind == "cell" for e in events), "the run got as far as its budget let it"


def test_a_capped_account_refuses_an_unpriced_model_before_its_first_call_naming_price() -> None:
    ledger = Ledger(budget=100.0)
    leaf = ScriptedModel(lambda m: "x", model_name="leaf")
    root = testing.by_turn("FINAL(done)", model_name="mystery-root")
    rlm = RLM(backend=root, other_backends=[leaf], environment="local")
    result = rlm.completion("ctx", "q", account=ledger)
    assert result.finish_reason == "budget" and result.metadata["limit"] == "key_budget"
    assert "'mystery-root' has no price" in (result.error or "") and "--price mystery-root=" in (result.error or "")
    assert root.calls == [] and ledger.settled == []


def test_a_call_replayed_from_the_cache_releases_its_hold_and_costs_the_account_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    first = Ledger()
    assert _rlm(BATCH, "FINAL(done)", cache=str(cache)).completion("ctx", "q", account=first).response == "done"
    again = Ledger()
    result = _rlm(BATCH, "FINAL(done)", cache=str(cache)).completion("ctx", "q", account=again)
    assert result.response == "done"
    assert again.settled == [] and again.spent == 0 and again.released == 0
    assert again.holds == {} and again._next == 0, "a replayed call holds nothing: a spent key may still replay"
    spent = Ledger(budget=0.0)
    assert _rlm(BATCH, "FINAL(done)", cache=str(cache)).completion("ctx", "q", account=spent).response == "done"


def test_the_direct_route_s_one_call_is_settled_with_the_account() -> None:
    ledger = Ledger()
    root = ScriptedModel(lambda m: "short answer", model_name="root")
    rlm = RLM(backend=root, environment="local", prices=PRICES, direct_below_tokens=100_000)
    result = rlm.completion("a short context", "q", account=ledger)
    assert result.response == "short answer" and result.metadata.get("route") == "direct"
    assert [(model, cut) for model, _i, _o, _d, cut in ledger.settled] == [("root", False)]
    assert ledger.spent == result.usage_summary.total_cost > 0


def test_a_call_cancelled_in_flight_is_settled_as_cut() -> None:
    ledger = Ledger()
    root = ScriptedModel(lambda m: "FINAL(late)", model_name="root", latency=30)
    rlm = RLM(backend=root, environment="local", prices=PRICES)

    async def cancel_mid_call() -> Any:
        cancel = asyncio.Event()
        running = asyncio.create_task(rlm.acompletion("ctx", "q", account=ledger, cancel_event=cancel))
        while not ledger.holds:
            await asyncio.sleep(0.01)
        cancel.set()
        return await running

    result = asyncio.run(cancel_mid_call())
    assert result.finish_reason == "cancelled"
    assert len(ledger.settled) == 1 and ledger.settled[0][4] is True, "the cut call is billed, and marked cut"
    assert ledger.settled[0][3] > 0 and ledger.holds == {}
