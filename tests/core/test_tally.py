"""`EventTally`: the one reducer of the event stream behind the CLI line, MCP progress and the console."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from rlm_adapters import RLM, CellExecuted, RootCall, ScriptedModel, SubCallFinished, SubCallStarted
from rlm_adapters.core.engine.console import ConsolePrinter
from rlm_adapters.core.events import Event
from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.tally import EventTally
from rlm_adapters.testing import by_turn

CALL: dict[str, Any] = {"model": "m", "input_tokens": 10, "output_tokens": 5, "cost": 0.5, "duration": 0.1}


def root(iteration: int, depth: int = 0) -> RootCall:
    return RootCall(run_id="r", depth=depth, iteration=iteration, messages_sent=[], reply="", **CALL)


def started(call_id: str, batch_id: str | None = None, size: int = 1) -> SubCallStarted:
    return SubCallStarted(
        run_id="r", call_id=call_id, batch_id=batch_id, batch_size=size, call_kind="llm_query", model="m", prompt="p"
    )


def finished(call_id: str, batch_id: str | None = None, error: str | None = None) -> SubCallFinished:
    return SubCallFinished(
        run_id="r", call_id=call_id, batch_id=batch_id, call_kind="llm_query", response="", error=error, **CALL
    )


def test_iterations_are_the_top_levels_and_every_call_is_counted() -> None:
    tally = EventTally()
    assert tally.add(root(1)) == "iteration"
    assert tally.add(root(7, depth=1)) is None  # a nested run's turn does not move the top-level count
    assert (tally.iteration, tally.root_calls, tally.tokens, tally.cost) == (1, 2, 30, 1.0)


def test_a_batch_counts_whole_at_its_first_call_and_ends_once() -> None:
    tally = EventTally()
    assert tally.add(started("a", "b1", 3)) == "batch_started"
    assert (tally.sub_calls_started, tally.sub_calls_finished) == (3, 0)
    assert tally.add(started("b", "b1", 3)) is None
    assert tally.add(finished("a", "b1")) is None
    assert tally.add(finished("b", "b1", error="Error: boom")) is None
    assert tally.add(finished("c", "b1")) == "calls_done"
    assert (tally.sub_calls_started, tally.sub_calls_finished, tally.sub_call_errors) == (3, 3, 1)
    # A single call: nothing to announce when it leaves, done when it is back.
    assert tally.add(started("d")) is None
    assert tally.add(finished("d")) == "calls_done"
    assert (tally.sub_calls_started, tally.sub_calls_finished) == (4, 4)


def test_odd_events_are_counted_without_breaking_the_tally() -> None:
    tally = EventTally()
    assert tally.add(started("a", "b", size=0)) == "batch_started"  # a batch of "0" is still the call that came
    assert tally.sub_calls_started == 1
    assert tally.add(finished("never-started")) is None  # counted, but it closes nothing
    assert tally.add(finished("a", "b")) == "calls_done"
    assert tally.add(finished("a", "b")) is None  # a repeated end is not a second milestone
    assert tally.sub_calls_finished == 3


def test_the_tally_of_a_real_run_matches_its_result() -> None:
    """Counted from events alone, the totals are the result's: nothing the displays show is guessed."""

    model = by_turn(
        "```repl\nxs = llm_query_batched(['a', 'b', 'c'])\nprint(len(xs))\n```",
        "```repl\nFINAL(str(len(xs)))\n```",
        model_name="root",
    )
    leaf = ScriptedModel(lambda m: LMResponse("leaf", 40, 2, "leaf"), model_name="leaf")
    events: list[Event] = []
    rlm = RLM(backend=model, other_backends=[leaf], environment="local")
    result = rlm.completion("context", "q", callbacks=[events.append])
    tally = EventTally()
    for event in events:
        tally.add(event)
    total = result.usage_summary.total
    assert (tally.iteration, tally.root_calls) == (result.iterations, 2)
    assert tally.sub_calls_started == tally.sub_calls_finished == result.metadata["sub_calls"] == 3
    assert tally.tokens == total.total_tokens and abs(tally.cost - result.cost) < 1e-12


def test_the_console_prints_the_sub_calls_of_each_cell_from_the_tally() -> None:
    out = io.StringIO()
    printer = ConsolePrinter(Console(file=out, width=200))

    def cell(index: int) -> CellExecuted:
        return CellExecuted(run_id="r", iteration=1, index=index, code="x", output="", error=None, duration=0.0)

    for event in (started("a", "b", 2), finished("a", "b"), finished("b", "b", error="Error: x"), cell(1), cell(2)):
        printer(event)
    text = out.getvalue()
    assert text.count("[2 sub-calls, 1 failed]") == 1  # the second cell made none
    assert printer.tally.sub_calls_finished == 2


def test_replayed_calls_are_counted_and_every_display_says_so(tmp_path: Any) -> None:
    tally = EventTally()
    tally.add(RootCall(run_id="r", iteration=1, messages_sent=[], reply="", cached=True, **CALL))
    for n in range(5):
        tally.add(started(f"c{n}", "b", 5))
        call = {"run_id": "r", "call_id": f"c{n}", "batch_id": "b", "call_kind": "llm_query", "response": ""}
        tally.add(SubCallFinished(error=None, cached=n < 4, **call, **CALL))
    assert (tally.root_calls_cached, tally.sub_calls_cached) == (1, 4)
    assert tally.sub_calls_text() == "5 sub-calls (4 cached)"
    assert EventTally().sub_calls_text() == "0 sub-calls"

    # The console, over a real run replayed from a cache.
    for _ in range(2):
        out = io.StringIO()
        leaf = ScriptedModel(lambda m: "x", model_name="leaf")
        root = by_turn("```repl\nprint(llm_query_batched(['a', 'b']))\n```", "FINAL(ok)", model_name="root")
        rlm = RLM(backend=root, environment="local", other_backends=[leaf], cache=tmp_path / "c.sqlite")
        rlm.completion("ctx", "q", callbacks=[ConsolePrinter(Console(file=out, width=200))])
    text = out.getvalue()
    assert "[2 sub-calls (2 cached), 0 failed]" in text
    assert text.count("(cached)") == 2  # both root turns
    assert "(4 of 4 calls cached)" in text


def test_every_display_says_progress_in_one_formatters_words() -> None:
    """The CLI's line, rlm serve's stream and MCP's notifications (issue 49: they said "turn" and "iteration")."""
    tally = EventTally(iteration=3, sub_calls_started=48, sub_calls_finished=12, input_tokens=51_000, output_tokens=200)
    tally.cost = 0.1234
    line = tally.progress_line(30)
    assert line.startswith("iteration 3/30 · 12/48 sub-calls · 51,200 tokens · $0.1234 · ") and line.endswith(" s")
    assert tally.progress_line(30, detail=False) == "iteration 3/30 · 12/48 sub-calls · $0.12"
    assert EventTally().progress_line(30, detail=False) == "iteration 0/30 · $0.00"
