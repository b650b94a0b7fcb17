"""The provenance matcher on its own: what counts as having reached a model, which ranges, and how fast."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest

from rlm_adapters.core.events import CellExecuted, RunStarted, SubCallFinished, SubCallSent, SubCallStarted
from rlm_adapters.sources import Document, ProvenanceTracker
from rlm_adapters.sources import _provenance as provenance

BOILERPLATE = "Confidential: internal distribution only, do not forward outside the company.\n"


def _text(rng: random.Random, words: list[str], sentences: int) -> str:
    return " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(8, 16))) + "." for _ in range(sentences))


def _corpus(count: int = 20, sentences: int = 40, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    return [BOILERPLATE + _text(rng, words, sentences) for _ in range(count)]


_calls = iter(range(10**9))


def _sub(prompt: str, *, sent: bool = True) -> list[Any]:
    """The events of one sub-call: started, sent (unless the budget stopped it), finished."""
    ids: dict[str, Any] = {"run_id": "r", "call_id": f"c{next(_calls)}", "batch_id": None, "model": "m"}
    events: list[Any] = [SubCallStarted(**ids, batch_size=1, call_kind="llm_query", prompt=prompt)]
    if sent:
        events.append(SubCallSent(**ids, call_kind="llm_query"))
    error = None if sent else "budget spent"
    events.append(
        SubCallFinished(
            **ids, call_kind="llm_query", response="ok", error=error, input_tokens=1, output_tokens=1, cost=0.0,
            duration=0.0,
        )
    )  # fmt: skip
    return events


def _cell(output: str, *, final: bool = False, depth: int = 0) -> list[Any]:
    return [
        CellExecuted(
            run_id="r", depth=depth, iteration=1, index=1, code="", output=output, error=None, duration=0.0, final=final
        )
    ]


def _start(preview: str, *, depth: int = 0, query: str | None = None) -> list[Any]:
    return [
        RunStarted(
            run_id="r", depth=depth, query=query, context_description={"preview": preview}, root_model="m",
            sub_models=[], sandbox="local", isolation="none", max_iterations=3, max_depth=1,
        )
    ]  # fmt: skip


def _tracker(docs: list[str], *events: list[Any], max_output_chars: int = 10_000) -> ProvenanceTracker:
    tracker = ProvenanceTracker(
        [Document(f"d{i}", text) for i, text in enumerate(docs)], max_output_chars=max_output_chars
    )
    for group in events:
        for event in group:
            tracker.on_event(event)
    tracker.wait()
    return tracker


def _resolve(docs: list[str], *events: list[Any], max_output_chars: int = 10_000) -> dict[str, list[tuple[int, int]]]:
    return {use.doc_id: use.ranges for use in _tracker(docs, *events, max_output_chars=max_output_chars).resolve()}


def test_whole_documents_and_a_slice_inside_an_instruction() -> None:
    docs = _corpus()
    cut = docs[4][1000:1400]
    used = _resolve(docs, _sub(f"Summarise.\n\n{docs[2]}\n\nAnd this:\n{cut}\nThanks"))
    assert used["d2"] == [(0, len(docs[2]))]
    [(start, end)] = used["d4"]
    # The slice cut words at both ends: the range is what the slice holds, to the character.
    assert (start, end) == (1000, 1400)
    assert set(used) == {"d2", "d4"}


def test_a_prompt_the_budget_never_let_out_reached_no_model() -> None:
    """Defect 9 of issue 24: a prompt counts once its request is sent, not when the call starts."""
    docs = _corpus()
    used = _resolve(docs, _sub(docs[1]), _sub(docs[6], sent=False))
    assert set(used) == {"d1"}


def test_a_printed_repr_is_matched_despite_escapes() -> None:
    docs = _corpus()
    docs[7] = docs[7].replace(". ", '.\n"Quoted" it\'s\t', 5)
    used = _resolve(docs, _cell(repr({"id": "d7", "text": docs[7][:3000]})), max_output_chars=100_000)
    [(start, end)] = used["d7"]
    assert start == 0 and 2990 <= end <= 3000
    assert set(used) == {"d7"}


def test_grep_hits_printed_as_a_list_and_wrapped_in_prompts_are_found() -> None:
    docs = _corpus()
    lines = [docs[3][500:640], docs[9][2000:2110]]
    used = _resolve(docs, _cell(repr(lines)), _sub(f"Is this relevant? {docs[12][800:900]}"))
    assert used == {"d3": [(500, 640)], "d9": [(2000, 2110)], "d12": [(800, 900)]}


def test_text_every_document_shares_is_attributed_to_none() -> None:
    docs = _corpus()
    assert _resolve(docs, _cell(BOILERPLATE * 3)) == {}
    # The shared header followed by one document's own text belongs to that document alone.
    assert set(_resolve(docs, _cell(docs[11][:600]))) == {"d11"}


def test_duplicate_documents_are_both_reported_when_sent_whole() -> None:
    docs = _corpus(count=4)
    docs[3] = docs[1]
    assert set(_resolve(docs, _sub(docs[1]))) == {"d1", "d3"}


def test_short_documents_count_only_when_sent_whole() -> None:
    docs = [*_corpus(count=3), "Ship the release on Friday morning.", "Budget approved."]
    assert _resolve(docs, _sub("Items:\nShip the release on Friday morning.\nBudget approved.")) == {
        "d3": [(0, len(docs[3]))]  # under 5 words ("Budget approved.") is too little to tell: never matched
    }
    assert _resolve(docs, _sub("Ship the release on Friday, please")) == {}


def test_what_did_not_reach_a_model_is_ignored() -> None:
    docs = _corpus()
    tool = SubCallStarted(
        run_id="r", call_id="t", batch_id=None, batch_size=1, call_kind="tool", model="save", prompt=docs[0]
    )
    final_cell = _cell(docs[1], final=True)  # the run ended on it: its output went nowhere
    unrelated = _cell(json.dumps({"count": 20, "names": ["a.txt", "b.txt"]}))
    assert _resolve(docs, [tool], final_cell, unrelated) == {}


def test_only_the_head_and_tail_of_a_long_output_count() -> None:
    docs = _corpus(count=6)
    used = _resolve(docs, _cell("\n".join(docs)), max_output_chars=3_000)
    assert set(used) == {"d0", "d5"}
    assert used["d0"][0][0] == 0 and used["d0"][0][1] <= 2_000
    assert used["d5"][0][1] == len(docs[5]) and used["d5"][0][1] - used["d5"][0][0] <= 1_000


def test_nested_runs_count_like_the_top_level_and_their_query_too() -> None:
    docs = _corpus()
    assert set(_resolve(docs, _cell(docs[9], depth=1))) == {"d9"}
    assert set(_resolve(docs, _start("", depth=1, query=f"Summarise: {docs[5][:900]}"))) == {"d5"}


def test_the_preview_counts_as_shown_but_not_as_read() -> None:
    docs = _corpus()
    tracker = _tracker(docs, _start(json.dumps({"id": "d0", "text": docs[0]})[:400]))
    [use] = tracker.resolve()
    assert use.doc_id == "d0" and use.previewed == 1 and use.sub_calls == use.printed == 0
    assert tracker.resolve(kinds=frozenset({"sub_call", "printed"})) == []


def test_counts_say_how_often_a_document_reached_a_model() -> None:
    docs = _corpus()
    tracker = _tracker(docs, _sub(docs[2]), _sub(docs[2]), _cell(docs[2][:500]))
    [use] = tracker.resolve()
    assert (use.sub_calls, use.printed) == (2, 1)


@pytest.mark.parametrize("escaped", [False, True])
def test_long_prompts_go_through_the_anchors_and_give_the_same_ranges(escaped: bool) -> None:
    docs = _corpus(count=60, sentences=200, seed=5)  # about 1.5 MB, lines of a few KB
    prompt = "Summarise these:\n" + "\n\n".join(docs[10:40]) + "\nand this part:\n" + docs[50][3000:9000]
    if escaped:
        prompt = json.dumps({"task": prompt})  # every newline and quote escaped, as json.dumps sends it
    assert len(prompt) > provenance.LONG_PROBE
    tracker = _tracker(docs, _sub(prompt))
    assert tracker._anchored and tracker._runs  # the long runs were found while the run went on
    used = {use.doc_id: use.ranges for use in tracker.resolve()}
    assert used == {**{f"d{i}": [(0, len(docs[i]))] for i in range(10, 40)}, "d50": [(3000, 9000)]}
    assert sum(len(block.text) for block in tracker.blocks) < 1_000  # only the instructions are left


def test_boilerplate_found_in_many_places_seeds_nothing() -> None:
    shared = "Copyright 2024 Example Corp, all rights reserved; see LICENSE for terms.\n"
    docs = [shared + text for text in _corpus(count=40)]
    assert _resolve(docs, _cell(shared)) == {}


def test_what_exceeds_the_kept_text_is_counted_as_not_matched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "MAX_BLOCKS_CHARS", 1_000)
    docs = _corpus()
    tracker = _tracker(docs, _cell(docs[1][:900]), _cell(docs[2][:900]))
    assert tracker.unmatched_chars == 900
    assert {use.doc_id for use in tracker.resolve()} == {"d1"}


def test_a_worker_thread_matches_while_the_run_goes_on() -> None:
    docs = _corpus()
    tracker = ProvenanceTracker([Document(f"d{i}", text) for i, text in enumerate(docs)])
    tracker.start()
    for event in _sub(docs[3]):
        tracker.on_event(event)
    tracker.wait()
    assert [use.doc_id for use in tracker.resolve()] == ["d3"]
    tracker.stop()


def test_a_wait_after_a_stop_returns_while_the_worker_is_still_busy() -> None:
    # RLMQueryEngine asks for the documents used after the findings stopped the worker: a wait whose
    # marker went in behind the stop was never answered, and the query hung for good.
    docs = _corpus()
    tracker = ProvenanceTracker([Document(f"d{i}", text) for i, text in enumerate(docs)])
    busy, release = threading.Event(), threading.Event()
    match = tracker._match

    def slow_match(text: str, kind: provenance.ProbeKind) -> None:
        busy.set()
        release.wait()
        match(text, kind)

    tracker._match = slow_match  # type: ignore[method-assign]
    tracker.start()
    for event in _sub(docs[3]):
        tracker.on_event(event)
    assert busy.wait(10)
    tracker.stop()  # queued while the worker is still matching the prompt
    waiter = threading.Thread(target=tracker.wait)
    waiter.start()
    release.set()
    waiter.join(30)
    assert not waiter.is_alive(), "wait() after stop() never returned"
    assert [use.doc_id for use in tracker.resolve()] == ["d3"]


def test_five_megabytes_index_and_match_quickly() -> None:
    docs = _corpus(count=200, sentences=300, seed=11)
    assert sum(map(len, docs)) > 5_000_000
    started = time.perf_counter()
    events = [_sub("\n\n".join(docs[:100]))]  # 2.5 MB in one prompt
    events += [_sub(f"Look at this:\n{docs[number][5000:5600]}") for number in range(100, 200, 10)]
    uses = _tracker(docs, *events).resolve()
    elapsed = time.perf_counter() - started
    assert [u.doc_id for u in uses] == [f"d{i}" for i in (*range(100), *range(100, 200, 10))]
    # Well under a second here; the bound leaves room for a loaded CI machine.
    assert elapsed < 10, elapsed


def test_a_run_starting_on_the_last_dot_of_the_line_before_does_not_use_that_line() -> None:
    # Found with RLMQueryEngine.from_paths: the prompt quoted line 4 after its own line ending in ".\n", the
    # maximal match began at the dot of line 3, and the citation read p7:L3-4.
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)) for _ in range(300)]
    lines = [_text(rng, words, 2) for _ in range(8)]
    doc = "\n".join(lines) + "\n"
    fact = lines[3]
    prompt = "Here is what I found in the report.\n" + fact + "\n- is it right?"
    [(start, end)] = _resolve([doc], _sub(prompt))["d0"]
    assert doc[start:end].strip() == fact, doc[start:end]
    assert provenance.trimmed(doc, doc.index(lines[2][-1:] + "\n" + fact), len(doc))[0] == doc.index(fact)


def test_trimming_drops_only_a_few_characters_of_an_edge_line_and_never_widens_a_range() -> None:
    text = "alpha beta gamma.\ndelta epsilon.\n- zeta eta theta\n"
    second = text.index("delta")
    assert provenance.trimmed(text, second - 2, second + 14) == (second, second + 14)  # "a." before it: dropped
    beta = text.index("beta")
    assert provenance.trimmed(text, beta, second + 5) == (beta, second - 1)  # 11 kept, "delta" of the next not
    assert provenance.trimmed(text, beta, second + 9) == (beta, second + 9)  # "delta eps": 9 characters, kept
    assert provenance.trimmed(text, second, second + 14) == (second, second + 14)  # whole line: unchanged
    assert provenance.trimmed(text, second, second + 18) == (second, second + 14)  # "\n- z" of the next: dropped
    after = text.index("- zeta")
    assert provenance.trimmed(text, second, after + 13) == (second, after + 13)  # "- zeta eta th" kept
    assert provenance.trimmed(text, 5, 5) == (5, 5)


def test_long_texts_of_a_small_share_of_the_input_are_found_by_one_scan_not_an_index() -> None:
    """Issue 47: the index of a 200 MB input cost seconds to build for 16 chunks sent. Chunks adding up to
    less than a quarter of the input are found by one scan with their own anchors, to the character."""
    docs = _corpus(count=4, sentences=2000, seed=8)  # four documents of about 200 KB
    chunks = [(2, 10_000, 90_000), (3, 103_456, 150_000)]  # one long enough (64 KB) to go through anchors
    built: list[bool] = []
    tracker = ProvenanceTracker(
        [Document(f"d{i}", text) for i, text in enumerate(docs)],
        anchors=lambda: built.append(True) or None,  # type: ignore[arg-type,func-returns-value]
    )
    for doc, start, end in chunks:
        for event in _sub(f"Summarise this part:\n{docs[doc][start:end]}\nThanks"):
            tracker.on_event(event)
    tracker.wait()
    assert built == []  # the index was never asked for
    used = {use.doc_id: use.ranges for use in tracker.resolve()}
    assert used == {"d2": [(10_000, 90_000)], "d3": [(103_456, 150_000)]}
    assert sum(len(block.text) for block in tracker.blocks) < 100  # only the instruction and its thanks


def test_long_texts_past_a_quarter_of_the_input_go_through_its_index() -> None:
    docs = _corpus(count=4, sentences=2000, seed=8)
    tracker = _tracker(docs, _sub(docs[0]), _sub(docs[1]))  # half the input sent: the index pays for itself
    assert tracker._by_index
    assert {use.doc_id: use.ranges for use in tracker.resolve()} == {
        "d0": [(0, len(docs[0]))],
        "d1": [(0, len(docs[1]))],
    }
