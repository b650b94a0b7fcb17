"""Runs with a call cache: a second run replays every call, pays nothing, stops where the first did."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import (
    RLM,
    ConfigurationError,
    Event,
    Message,
    ModelError,
    RLMLogger,
    RootCall,
    ScriptedModel,
    SubCallFinished,
    read_trajectory,
    testing,
)
from rlm_adapters.core.cache import CachedReply, SQLiteCallCache
from rlm_adapters.errors import RLMRunFailed

FAN_OUT = "```repl\nparts = llm_query_batched(['same', 'same', 'other', 'same'])\nprint(parts)\n```"
PRICES = {"root": (1.0, 2.0), "leaf": (3.0, 4.0)}


def by_turn(*replies: str) -> ScriptedModel:
    return testing.by_turn(*replies, model_name="root")


def counting_leaf() -> ScriptedModel:
    """A sampled model, as far as a cache can tell: each call gets a new answer, even to the same prompt."""
    count = [0]

    def reply(messages: list[Message]) -> str:
        count[0] += 1
        return f"{messages[-1]['content']} -> answer {count[0]}"

    return ScriptedModel(reply, model_name="leaf")


class Run:
    """One RLM over fresh scripted models and a cache; records the events."""

    def __init__(self, cache: Any, *replies: str, **kwargs: Any) -> None:
        self.root = by_turn(*replies)
        self.leaf = counting_leaf()
        self.events: list[Event] = []
        kwargs.setdefault("environment", "local")
        kwargs.setdefault("prices", PRICES)
        self.rlm = RLM(
            backend=self.root, other_backends=[self.leaf], cache=cache, callbacks=[self.events.append], **kwargs
        )

    def __call__(self, context: str = "the context", query: str = "q") -> Any:
        return self.rlm.completion(context, query)

    @property
    def requests(self) -> int:
        return len(self.root.calls) + len(self.leaf.calls)

    def cached_flags(self) -> list[bool]:
        return [e.cached for e in self.events if isinstance(e, RootCall | SubCallFinished)]


def test_a_second_run_replays_every_call_without_a_request_and_pays_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    first = Run(cache, FAN_OUT, "FINAL(done)")
    original = first()
    assert original.finish_reason == "final" and first.requests == 6
    assert not any(first.cached_flags())
    paid = original.usage_summary.to_dict()
    assert paid["total"]["cost"] > 0 and "cached_calls" not in paid["total"]

    again = Run(cache, FAN_OUT, "FINAL(done)")
    replayed = again()
    assert again.requests == 0
    assert (replayed.response, replayed.finish_reason, replayed.iterations) == ("done", "final", 2)
    usage = replayed.usage_summary.to_dict()
    for part in ("total", "root", "sub"):
        assert usage[part]["calls"] == usage[part]["cached_calls"] == paid[part]["calls"]
        assert usage[part]["input_tokens"] == paid[part]["input_tokens"]
        tokens = paid[part]["input_tokens"] + paid[part]["output_tokens"]
        assert usage[part]["cached_tokens"] == tokens and usage[part]["cost"] == 0.0
    assert usage["by_model"]["leaf"]["cached_calls"] == 4
    assert again.cached_flags() == [True] * 6
    # The cells ran again and printed what they printed the first time, replies in their places.
    outputs = [e.output for e in again.events if e.kind == "cell"]
    assert outputs == [e.output for e in first.events if e.kind == "cell"]


def test_the_resume_note_gives_what_the_replayed_calls_cost_and_never_calls_unpriced_ones_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 37: "resumed: 40 of 60 model calls from calls.sqlite, $0.31 not paid again".
    first = Run(tmp_path / "priced.sqlite", FAN_OUT, "FINAL(done)")
    paid = first().usage_summary.total.cost
    assert paid > 0
    with caplog.at_level(logging.INFO, logger="rlm_adapters"):
        replayed = Run(tmp_path / "priced.sqlite", FAN_OUT, "FINAL(done)")()
    # The log says it once, as every adapter does.
    said = [r.getMessage() for r in caplog.records if "not paid again" in r.getMessage()]
    assert said == [f"run {replayed.run_id} {replayed.resumed()}"]
    figure = replayed.metadata["replayed_cost"]
    assert figure == pytest.approx(paid)
    shown = f"${figure:.2f}" if figure >= 0.01 else f"${figure:.6f}".rstrip("0")
    assert replayed.resumed("calls.sqlite") == f"resumed: 6 of 6 model calls from calls.sqlite, {shown} not paid again"
    assert "$0.00 " not in str(replayed.resumed())  # a fraction of a cent is shown as one
    # No price for either model: what they cost is unknown, not $0.00.
    Run(tmp_path / "unpriced.sqlite", FAN_OUT, "FINAL(done)", prices={})()
    unpriced = Run(tmp_path / "unpriced.sqlite", FAN_OUT, "FINAL(done)", prices={})()
    assert unpriced.metadata["replayed_unpriced"] == ["leaf", "root"]
    assert unpriced.resumed() == (
        "resumed: 6 of 6 model calls from the call cache, not paid again (cost unknown: no price for 'leaf', 'root')"
    )
    # One priced and one not: the figure, and the calls it leaves out.
    Run(tmp_path / "mixed.sqlite", FAN_OUT, "FINAL(done)", prices={"root": (1.0, 2.0)})()
    mixed = Run(tmp_path / "mixed.sqlite", FAN_OUT, "FINAL(done)", prices={"root": (1.0, 2.0)})()
    note = mixed.resumed()
    assert note is not None and note.startswith("resumed: 6 of 6 model calls from the call cache, $")
    assert note.endswith(" not paid again, plus calls of 'leaf' (no price)")


def test_identical_prompts_of_one_batch_each_get_their_own_reply_back_in_place(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    first = Run(cache, FAN_OUT, "FINAL(done)")
    first()
    printed = next(e.output for e in first.events if e.kind == "cell")
    # Three calls of one prompt, three answers: each call is a call.
    assert "same -> answer 1" in printed and "same -> answer 2" in printed and "same -> answer 4" in printed
    again = Run(cache, FAN_OUT, "FINAL(done)")
    again()
    assert next(e.output for e in again.events if e.kind == "cell") == printed
    # A request's occurrences are numbered in the run: another run asking `same` four times in a row gets
    # the three stored answers in order (whatever cell made them), and the fourth is a new call.
    sequential = "```repl\nprint([llm_query('same') for _ in range(4)])\n```"
    later = Run(cache, sequential, "FINAL(done)")
    later(query="another question")  # else the root's first request is the first run's, and so its reply
    assert len(later.leaf.calls) == 1
    printed = next(e.output for e in later.events if e.kind == "cell")
    assert printed.startswith("['same -> answer 1', 'same -> answer 2', 'same -> answer 4', 'same -> answer 1']")


def test_a_run_stopped_part_way_resumes_from_its_first_unfinished_call(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    script = ["```repl\nprint(llm_query('one'))\n```", "```repl\nprint(llm_query('two'))\n```", "FINAL(three)"]
    first = Run(cache, *script)
    calls = [0]
    real = first.root._fn

    def dies_at_turn_three(messages: list[Message]) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            raise ModelError("the provider went away", model="root")  # stands for a kill during the call
        return real(messages)  # type: ignore[call-arg]

    first.root._fn = dies_at_turn_three
    with pytest.raises(RLMRunFailed, match="the provider went away"):
        first()
    resumed = Run(cache, *script)
    result = resumed()
    assert result.response == "three"
    # Turns 1 and 2 and their sub-calls came from the cache; the root call that had failed went live.
    assert len(resumed.leaf.calls) == 0 and len(resumed.root.calls) == 1
    assert resumed.cached_flags() == [True, True, True, True, False]


def test_a_resumed_run_stops_where_the_budget_stopped_the_original(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    loop = "```repl\nprint(llm_query('x' * 400))\n```"
    first = Run(cache, loop, max_sub_tokens=400)
    original = first()
    assert original.finish_reason == "budget"
    again = Run(cache, loop, max_sub_tokens=400)
    replayed = again()
    assert again.requests == 0
    assert (replayed.finish_reason, replayed.response, replayed.iterations) == (
        original.finish_reason,
        original.response,
        original.iterations,
    )
    assert replayed.metadata["limit"] == original.metadata["limit"] == "sub_tokens"


def test_replayed_calls_count_their_original_cost_toward_max_cost(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    loop = "```repl\nprint(llm_query('y' * 4000))\n```"
    prices = {"root": (100.0, 100.0), "leaf": (100.0, 100.0)}
    first = Run(cache, loop, max_cost=0.5, prices=prices)
    original = first()
    assert original.finish_reason == "budget" and original.metadata["limit"] == "cost"
    again = Run(cache, loop, max_cost=0.5, prices=prices)
    replayed = again()
    assert again.requests == 0 and replayed.usage_summary.total_cost == 0.0
    assert (replayed.finish_reason, replayed.iterations) == (original.finish_reason, original.iterations)


@pytest.mark.parametrize(
    ("limits", "stopped_by"),
    [({"max_sub_calls": 5}, "sub_calls"), ({"max_root_tokens": 900}, "root_tokens")],
    ids=["sub-calls", "root tokens"],
)
def test_replayed_calls_count_toward_the_call_and_token_limits(
    tmp_path: Path, limits: dict[str, int], stopped_by: str
) -> None:
    cache = tmp_path / "calls.sqlite"
    loop = "```repl\nprint(llm_query_batched(['a', 'b']), 'x' * 300)\n```"
    original = Run(cache, loop, **limits)()
    assert original.finish_reason == "budget" and original.metadata["limit"] == stopped_by
    again = Run(cache, loop, **limits)
    replayed = again()
    assert again.requests == 0
    assert (replayed.finish_reason, replayed.iterations, replayed.metadata["limit"]) == (
        original.finish_reason,
        original.iterations,
        original.metadata["limit"],
    )
    assert replayed.usage_summary.to_dict()["total"]["calls"] == original.usage_summary.to_dict()["total"]["calls"]


def test_a_resumed_run_is_asked_to_raise_a_limit_where_the_original_was(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    asked: list[list[tuple[str, float, float]]] = []

    def runs_with_a_hook() -> tuple[Run, Any]:
        questions: list[tuple[str, float, float]] = []
        asked.append(questions)

        def hook(name: str, used: float, limit: float) -> float:
            questions.append((name, used, limit))
            return limit + 4

        run = Run(cache, FAN_OUT, "FINAL(done)", max_sub_calls=2, on_budget=hook)
        return run, run()

    _first, original = runs_with_a_hook()
    again, replayed = runs_with_a_hook()
    assert original.response == replayed.response == "done" and again.requests == 0
    assert asked[0] == asked[1] == [("max_sub_calls", 2, 2)]
    assert replayed.metadata["limits_raised"] == original.metadata["limits_raised"]


def test_a_different_model_or_question_is_a_different_request(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    Run(cache, FAN_OUT, "FINAL(done)")()
    other_question = Run(cache, FAN_OUT, "FINAL(done)")
    other_question(query="another question")
    assert len(other_question.root.calls) == 2  # its root calls differ; its sub-calls are the same requests
    renamed = Run(cache, FAN_OUT, "FINAL(done)")
    renamed.leaf._model_name = "leaf-2"
    renamed()
    assert len(renamed.root.calls) == 0 and len(renamed.leaf.calls) == 4


def test_the_log_and_the_events_say_which_calls_were_replayed(tmp_path: Path) -> None:
    cache = tmp_path / "calls.sqlite"
    Run(cache, FAN_OUT, "FINAL(done)")()
    again = Run(cache, FAN_OUT, "FINAL(done)", logger=RLMLogger(tmp_path / "logs"))
    result = again()
    assert result.trajectory_file is not None
    _header, records = read_trajectory(result.trajectory_file)
    calls = [r for r in records if r["kind"] in ("root_call", "sub_call_end")]
    assert len(calls) == 6 and all(r["cached"] is True for r in calls)
    assert records[-1]["usage"]["total"]["cached_calls"] == 6


class DictCache:
    """A `CallCache` in memory: any store that keeps replies by key works."""

    def __init__(self) -> None:
        self.data: dict[str, CachedReply] = {}
        self.closed = False

    async def get(self, key: str) -> CachedReply | None:
        return self.data.get(key)

    async def put(self, key: str, reply: CachedReply) -> CachedReply:
        return self.data.setdefault(key, reply)

    def close(self) -> None:
        self.closed = True


def test_any_call_cache_object_works_and_is_never_closed_by_the_engine() -> None:
    store = DictCache()
    run = Run(store, FAN_OUT, "FINAL(done)")
    run()
    assert len(store.data) == 6 and all("#" in key for key in store.data)
    assert sorted(int(key.rsplit("#", 1)[1]) for key in store.data) == [0, 0, 0, 0, 1, 2]
    again = Run(store, FAN_OUT, "FINAL(done)")
    again()
    again.rlm.close()
    assert again.requests == 0 and not store.closed


def test_the_reply_another_writer_stored_first_is_the_one_used() -> None:
    class Taken(DictCache):
        async def put(self, key: str, reply: CachedReply) -> CachedReply:
            if reply.model == "leaf":
                return CachedReply("stored by another process", 1, 1, "leaf", 0.0)
            return await super().put(key, reply)

    run = Run(Taken(), "```repl\nprint(llm_query('hi'))\n```", "FINAL(done)")
    run()
    assert "stored by another process" in next(e.output for e in run.events if e.kind == "cell")


def test_a_failing_store_costs_live_calls_never_the_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(DictCache):
        async def get(self, key: str) -> CachedReply | None:
            raise OSError("disk on fire")

        async def put(self, key: str, reply: CachedReply) -> CachedReply:
            raise OSError("disk on fire")

    run = Run(Broken(), FAN_OUT, "FINAL(done)")
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.cache"):
        result = run()
    assert result.response == "done" and run.requests == 6
    warnings = [r for r in caplog.records if "call cache failed" in r.getMessage()]
    assert len(warnings) == 1 and "disk on fire" in warnings[0].getMessage()


def test_a_cache_path_is_opened_once_and_closed_with_the_rlm(tmp_path: Path) -> None:
    run = Run(tmp_path / "calls.sqlite", FAN_OUT, "FINAL(done)")
    assert isinstance(run.rlm.cache, SQLiteCallCache)
    run()
    run.rlm.close()
    assert run.rlm.cache._worker is None
    run()  # a closed store starts its thread again
    assert run.requests == 6


def test_a_bad_cache_argument_is_refused_when_the_rlm_is_built(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cache=3 must be a file path"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), cache=3)
    text = tmp_path / "notes.txt"
    text.write_text("not a cache")
    with pytest.raises(ConfigurationError, match=r"notes\.txt' is not an rlm-adapters call cache"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), cache=text)
    assert text.read_text() == "not a cache"
