"""sources/_citations.py: the sources of an answer are the lines that reached a model and support it."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.sources import DocumentUse, Source, SourceTracker, _citations, cite, documents_of, sources_block
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


async def test_the_index_builds_during_the_run_and_a_failure_never_reaches_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rlm_adapters.core.events import SubCallStarted

    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa ALPHA-1\n"
    tracker = SourceTracker([{"id": "a.txt", "text": text}])
    assert await tracker.asources("ALPHA-1") == []  # nothing reached a model yet: no index is built
    tracker.start()
    tracker.on_event(
        SubCallStarted(
            run_id="r", call_id="c", batch_id=None, batch_size=1, call_kind="llm_query", model="m", prompt=text
        )
    )
    assert [s.location for s in await tracker.asources("ALPHA-1")] == ["a.txt:1"]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("index exploded")

    monkeypatch.setattr(_citations, "cite", broken)
    assert await tracker.asources("ALPHA-1") == []
    assert tracker.note == "sources could not be computed: RuntimeError: index exploded"


def test_inputs_over_the_cap_get_a_note_instead_of_sources(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr(_citations, "MAX_INDEXED_CHARS", 10)
    tracker = SourceTracker("x" * 11)
    assert tracker.sources("x") == []
    assert tracker.note == "sources are not computed for inputs over 10 characters (11 here)"


def test_an_answer_about_a_repeated_line_cites_those_lines_not_the_noise_around_them() -> None:
    lines = []
    for i in range(60):
        lines.append(f"10:{i:02d} INFO request ok")
        lines.append(f"10:{i:02d} ERROR disk quota exceeded" if i % 3 == 0 else f"10:{i:02d} ERROR timeout")
    text = "\n".join(lines) + "\n"
    sources = cite([("app.log", text)], [DocumentUse(0, "app.log", [(0, len(text))])], "disk quota exceeded, 20 times")
    assert len(sources) == 8
    assert all("disk quota exceeded" in s.excerpt and s.line_start == s.line_end for s in sources)
