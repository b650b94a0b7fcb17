"""sources/_citations.py: the sources of an answer are the lines that reached a model and support it."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.events import CellExecuted, SubCallSent, SubCallStarted
from rlm_adapters.sources import (
    Claim,
    DocumentUse,
    Place,
    Source,
    SourceTracker,
    _tracker,
    cite,
    documents_of,
    sources_block,
)
from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.core.sandbox.test_docker import LOCAL_IMAGE, PROBLEM

KINDS: list[Any] = [
    "local",
    "subprocess",
    pytest.param(
        "docker",
        marks=pytest.mark.skipif(
            PROBLEM is not None, reason=f"needs a Docker engine and the 'docker' package: {PROBLEM}"
        ),
    ),
]


@pytest.mark.parametrize("kind", KINDS)
async def test_planted_facts_in_300_files_are_cited_by_file_and_line(
    kind: str, fake_server: FakeOpenAIServer, openai_options: dict[str, Any]
) -> None:
    fake_server.root = planted.root()
    options = {"environment_kwargs": LOCAL_IMAGE} if kind == "docker" else {}
    rlm = RLM(**openai_options, environment=kind, **options)
    documents = planted.documents()
    tracker = SourceTracker(documents, max_output_chars=rlm.max_output_chars)
    result = await rlm.acompletion(documents, "What are the rollout passwords?", callbacks=[tracker.on_event])
    assert result.response == planted.ANSWER_TEXT
    sources = await tracker.asources(result.response)
    assert {(s.path, s.line_start, s.line_end) for s in sources} == planted.expected()
    for source in sources:
        assert "rollout password" in source.excerpt and source.chars == len(source.excerpt)


def test_adjacent_lines_merge_and_sources_are_ranked_and_capped() -> None:
    text = "intro line\nthe code is ALPHA-1\nand its twin BETA-2\nfiller\nfiller\nfiller\nlast GAMMA-3 here\n"
    documents = [("a.txt", text), ("b.txt", "only DELTA-4 here\n")]
    uses = [DocumentUse(0, "a.txt", [(0, len(text))]), DocumentUse(1, "b.txt", [(0, 17)])]
    sources = cite(documents, uses, "ALPHA-1, BETA-2, GAMMA-3 and DELTA-4")
    assert [(s.path, s.line_start, s.line_end) for s in sources] == [
        ("a.txt", 2, 3),  # two supporting lines in a row: one span, ranked first (it supports most)
        ("a.txt", 7, 7),
        ("b.txt", 1, 1),
    ]
    assert sources[0].excerpt == "the code is ALPHA-1\nand its twin BETA-2"
    assert len(cite(documents, uses, "ALPHA-1, BETA-2, GAMMA-3 and DELTA-4", limit=2)) == 2


def test_lines_that_never_reached_a_model_are_not_cited() -> None:
    text = "seen ALPHA-1\nnever shown ALPHA-1\n"
    sources = cite([("a.txt", text)], [DocumentUse(0, "a.txt", [(0, 12)])], "ALPHA-1")
    assert [(s.line_start, s.line_end) for s in sources] == [(1, 1)]


def test_an_answer_sharing_nothing_distinctive_cites_the_ranges_read() -> None:
    text = "one\ntwo\nthree\nfour\n"
    sources = cite([("a.txt", text)], [DocumentUse(0, "a.txt", [(4, 13)])], "yes")
    assert [(s.path, s.line_start, s.line_end, s.excerpt) for s in sources] == [("a.txt", 2, 3, "two\nthree")]


def test_documents_of_every_context_shape_and_the_block() -> None:
    assert documents_of("abc", "text") == [("text", "abc")]
    assert documents_of(["x", {"id": "i", "text": "y"}, {"content": "z"}, {"text": 1}]) == [
        ("context[0]", "x"),
        ("i", "y"),
        ("context[2]", "z"),
    ]
    assert documents_of({"k": "v", "n": 3}) == [("k", "v")]
    block = sources_block([Source("a.py", 3, 3, 5, "x"), Source("b.py", 1, 4, 9, "y")])
    assert block == "Sources:\n- a.py:3\n- b.py:1-4"
    assert sources_block([]) == ""


async def test_the_tracker_matches_during_the_run_and_a_failure_never_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa ALPHA-1\n"
    tracker = SourceTracker([{"id": "a.txt", "text": text}])
    assert await tracker.asources("ALPHA-1") == []  # nothing reached a model yet
    assert tracker.note == "no text reached a model: the run sent no sub-call and printed nothing"
    tracker = SourceTracker([{"id": "a.txt", "text": text}])
    tracker.start()
    ids: dict[str, Any] = {"run_id": "r", "call_id": "c", "batch_id": None, "call_kind": "llm_query", "model": "m"}
    tracker.on_event(SubCallStarted(**ids, batch_size=1, prompt=text))
    tracker.on_event(SubCallSent(**ids))
    assert [s.location for s in await tracker.asources("ALPHA-1")] == ["a.txt:1"]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("index exploded")

    monkeypatch.setattr(_tracker, "choose", broken)
    assert await tracker.asources("ALPHA-1") == []
    assert tracker.note == "sources could not be computed: RuntimeError: index exploded"


def test_inputs_over_the_old_cap_get_sources() -> None:
    """Issue 26: nothing was computed above 32,000,000 characters; now every size gets its sources."""
    filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit sed do\n" * 540_000
    planted_line = "the launch code for Project Halcyon is HALCYON-2291, keep it safe\n"
    text = filler[: len(filler) // 2] + planted_line + filler[len(filler) // 2 :]
    assert len(text) > 33_000_000
    tracker = SourceTracker(text, text_name="big.txt")
    for event in _cell_events(f"['{planted_line.strip()}']"):
        tracker.on_event(event)
    found = tracker.findings("The launch code is HALCYON-2291.")
    assert [s.location for s in found.sources] == ["big.txt:270001"]
    assert [c.status for c in found.claims if c.text == "HALCYON-2291"] == ["supported"]
    assert found.note is None


def _cell_events(output: str) -> list[Any]:
    return [CellExecuted(run_id="r", iteration=1, index=1, code="", output=output, error=None, duration=0.0)]


def test_notes_say_why_there_are_no_sources() -> None:
    text = "the deploy key is KEY-77 and it opens the staging vault door\n"
    assert SourceTracker(text).findings("").note == "the run gave no answer to cite"
    assert SourceTracker({"n": 3}).findings("x").note == "the context has no text to cite"
    short = SourceTracker(["two words", "three small words"]).findings("two words")
    assert short.note == "every document is under 5 words: too short to tell where a text came from"
    computed = SourceTracker(text)
    for event in _cell_events("matches: 17"):
        computed.on_event(event)
    found = computed.findings("There are 17 matches.")
    assert found.sources == []
    assert found.note == (
        "no text of the input reached a model (what did was the run's own: its code's output, prompts it wrote)"
    )
    read = SourceTracker(text)
    for event in _cell_events(text):
        read.on_event(event)
    found = read.findings("Yes.")
    assert [s.location for s in found.sources] == ["context:1"]  # what was read, for want of better
    assert found.note == (
        "the answer shares no distinctive word with the input that reached a model: these are the ranges that did"
    )


def test_a_converted_document_is_cited_by_its_page() -> None:
    pages = "Terms of the lease agreement between the parties.\n" * 40 + "The rent is 4,250 euros a month.\n"
    document = {"id": "contract.pdf", "text": pages, "metadata": {"places": [[0, "page", "11"], [1000, "page", "12"]]}}
    tracker = SourceTracker([document])
    for event in _cell_events("The rent is 4,250 euros a month."):
        tracker.on_event(event)
    found = tracker.findings("The rent is 4,250 euros.")
    # Page 12 starts at line 21 (character 1000) without a heading of its own: its line 1 is that line.
    assert [s.location for s in found.sources] == ["contract.pdf:p12:L21"]
    assert found.sources[0].place == Place("page", "12", None, 21, 21)
    assert found.sources[0].to_dict()["place"] == {
        "kind": "page",
        "start": "12",
        "end": None,
        "line_start": 21,
        "line_end": 21,
    }
    # A malformed place map is ignored, never trusted.
    bad = {**document, "metadata": {"places": [[5, "page", "2"], [1, "page", "1"]]}}
    assert documents_of([bad]) == [("contract.pdf", pages)]
    assert SourceTracker([bad]).documents[0].places == []


def test_the_block_ends_with_the_unsupported_claims() -> None:
    source = Source("a.py", 3, 3, 5, "x")
    claims = [
        Claim("ALPHA-1", "name", "supported", 0, 7, source=source),
        Claim("8,312", "number", "unsupported", 12, 17, reason="in no text that reached a model"),
    ]
    assert sources_block([source], claims) == (
        'Sources:\n- a.py:3\nUnsupported: "8,312" (in no text that reached a model)'
    )
    assert sources_block([], claims[1:], "no text reached a model") == (
        'Sources: none (no text reached a model)\nUnsupported: "8,312" (in no text that reached a model)'
    )
    assert sources_block([], claims[:1], "the run gave no answer to cite") == ""  # the note is in the structure


def test_an_answer_about_a_repeated_line_cites_those_lines_not_the_noise_around_them() -> None:
    lines = []
    for i in range(60):
        lines.append(f"10:{i:02d} INFO request ok")
        lines.append(f"10:{i:02d} ERROR disk quota exceeded" if i % 3 == 0 else f"10:{i:02d} ERROR timeout")
    text = "\n".join(lines) + "\n"
    sources = cite([("app.log", text)], [DocumentUse(0, "app.log", [(0, len(text))])], "disk quota exceeded, 20 times")
    assert len(sources) == 8
    assert all("disk quota exceeded" in s.excerpt and s.line_start == s.line_end for s in sources)
