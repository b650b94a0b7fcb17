"""The provenance matcher on its own: what counts as used, which ranges, and how fast on 5 MB."""

from __future__ import annotations

import json
import random
import time

from rlm_adapters.core.events import CellExecuted, SubCallStarted
from rlm_adapters.sources import DocumentIndex, ProvenanceTracker

BOILERPLATE = "Confidential: internal distribution only, do not forward outside the company.\n"


def _text(rng: random.Random, words: list[str], sentences: int) -> str:
    return " ".join(" ".join(rng.choice(words) for _ in range(rng.randint(8, 16))) + "." for _ in range(sentences))


def _corpus(count: int = 20, sentences: int = 40, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    return [BOILERPLATE + _text(rng, words, sentences) for _ in range(count)]


def _sub(prompt: str) -> SubCallStarted:
    return SubCallStarted(
        run_id="r", call_id="c", batch_id=None, batch_size=1, call_kind="llm_query", model="m", prompt=prompt
    )


def _cell(output: str, *, final: bool = False, depth: int = 0) -> CellExecuted:
    return CellExecuted(
        run_id="r", depth=depth, iteration=1, index=1, code="", output=output, error=None, duration=0.0, final=final
    )


def _resolve(docs: list[str], *events: object, max_output_chars: int = 10_000) -> dict[str, list[tuple[int, int]]]:
    index = DocumentIndex(docs, [f"d{i}" for i in range(len(docs))])
    tracker = ProvenanceTracker(max_output_chars=max_output_chars)
    for event in events:
        tracker.on_event(event)  # type: ignore[arg-type]
    return {use.doc_id: use.ranges for use in tracker.resolve(index)}


def test_whole_documents_and_a_slice_inside_an_instruction() -> None:
    docs = _corpus()
    cut = docs[4][1000:1400]
    used = _resolve(docs, _sub(f"Summarise.\n\n{docs[2]}\n\nAnd this:\n{cut}\nThanks"))
    assert used["d2"] == [(0, len(docs[2]))]
    [(start, end)] = used["d4"]
    # The slice cut words at both ends: the range is the whole words inside it.
    assert 1000 <= start <= 1012 and 1388 <= end <= 1400
    assert docs[4][start:end] in cut
    assert set(used) == {"d2", "d4"}


def test_a_printed_repr_is_matched_despite_escapes() -> None:
    docs = _corpus()
    docs[7] = docs[7].replace(". ", '.\n"Quoted" it\'s\t', 5)
    used = _resolve(docs, _cell(repr({"id": "d7", "text": docs[7][:3000]})), max_output_chars=100_000)
    [(start, end)] = used["d7"]
    assert start == 0 and 2990 <= end <= 3000
    assert set(used) == {"d7"}


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
    assert _resolve(docs, tool, final_cell, unrelated) == {}


def test_only_the_head_and_tail_of_a_long_output_count() -> None:
    docs = _corpus(count=6)
    used = _resolve(docs, _cell("\n".join(docs)), max_output_chars=3_000)
    assert set(used) == {"d0", "d5"}
    assert used["d0"][0][0] == 0 and used["d0"][0][1] <= 2_000
    assert used["d5"][0][1] == len(docs[5]) and used["d5"][0][1] - used["d5"][0][0] <= 1_000


def test_nested_runs_count_like_the_top_level() -> None:
    docs = _corpus()
    assert set(_resolve(docs, _cell(docs[9], depth=1))) == {"d9"}


def test_five_megabytes_index_and_match_quickly() -> None:
    docs = _corpus(count=200, sentences=300, seed=11)
    assert sum(map(len, docs)) > 5_000_000
    started = time.perf_counter()
    index = DocumentIndex(docs, [str(i) for i in range(len(docs))])
    tracker = ProvenanceTracker()
    tracker.on_event(_sub("\n\n".join(docs[:100])))  # 2.5 MB in one prompt
    for number in range(100, 200, 10):
        tracker.on_event(_sub(f"Look at this:\n{docs[number][5000:5600]}"))
    uses = tracker.resolve(index)
    elapsed = time.perf_counter() - started
    assert [u.doc_id for u in uses] == [*map(str, range(100)), *map(str, range(100, 200, 10))]
    # About a second on a laptop; the bound leaves room for a loaded CI machine.
    assert elapsed < 20, elapsed
