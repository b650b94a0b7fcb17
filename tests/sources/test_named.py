"""Files the answer names are cited at file level, only when the run's input held them as files."""

from __future__ import annotations

from typing import Any

from rlm_adapters.core.events import CellExecuted
from rlm_adapters.sources import SourceTracker, sources_block
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._named import named_files

A_TEXT = "The magic number is 4242 and the door code is ZEBRA-4821 today.\n"


def _file(path: str, text: str) -> dict[str, Any]:
    return {"id": path, "text": text, "metadata": {"path": path}}


def _context() -> list[dict[str, Any]]:
    return [
        _file("docs/a.md", A_TEXT),
        _file("docs/b.md", "Nothing to see here.\n"),
        _file("docs/caf\\xe9.md", "named in latin-1\n"),  # a name the loader escaped
        {"id": "text", "text": "inline words given with the files, not a file at all"},
    ]


def _block(answer: str, *printed: str) -> str:
    tracker = SourceTracker(_context())
    for number, output in enumerate(printed, 1):
        tracker.on_event(
            CellExecuted(
                run_id="r", depth=0, iteration=1, index=number, code="", output=output, error=None, duration=0.0,
                final=False,
            )
        )  # fmt: skip
    found = tracker.findings(answer)
    return sources_block(found.sources, found.claims, found.note)


def test_a_listing_cites_each_file_named_without_a_line() -> None:
    assert _block("docs/a.md,docs/b.md") == "Sources:\n- docs/a.md\n- docs/b.md"


def test_a_name_with_escapes_is_one_name_and_a_cited_file() -> None:
    assert _block("docs/b.md, docs/caf\\xe9.md") == "Sources:\n- docs/b.md\n- docs/caf\\xe9.md"


def test_a_file_outside_the_input_is_flagged_and_never_cited() -> None:
    # docs/image.png was skipped (binary): no document holds it, so it is no source and no input.
    block = _block("docs/a.md and docs/image.png")
    assert block == 'Sources:\n- docs/a.md\nUnsupported: "docs/image.png" (in no text that reached a model)'


def test_a_text_that_is_not_a_file_is_not_cited_by_its_name() -> None:
    assert _block("docs/a.md, text") == "Sources:\n- docs/a.md"


def test_a_file_whose_line_is_cited_is_not_cited_again() -> None:
    block = _block("ZEBRA-4821 (docs/a.md); docs/b.md", A_TEXT)
    assert block == "Sources:\n- docs/a.md:1\n- docs/b.md"


def test_only_a_name_standing_whole_counts() -> None:
    documents = [Document("docs/a.md", A_TEXT, file=True), Document("a.md", A_TEXT, file=True)]
    answer = "docs/a.md.bak old/docs/a.md xdocs/a.md docs/a.md-2 docs/a.md. a.md"
    found = [(documents[d].path, answer[s:e]) for d, s, e in named_files(answer, documents)]
    assert found == [("docs/a.md", "docs/a.md"), ("a.md", "a.md")]
    assert [s for _, s, _ in named_files(answer, documents)] == [answer.index("docs/a.md. "), len(answer) - 4]
