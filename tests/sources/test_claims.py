"""An answer split into claims, and each claim checked against the input text that reached a model."""

from __future__ import annotations

import json
from typing import Any

from rlm_adapters.core.events import CellExecuted, SubCallSent, SubCallStarted
from rlm_adapters.sources import SourceTracker
from rlm_adapters.sources._check import NOWHERE, OWN_TEXT
from rlm_adapters.sources._claims import MAX_CLAIMS, split, split_value


def _kinds(answer: str) -> list[tuple[str, str]]:
    drafts, _ = split(answer)
    for draft in drafts:
        if draft.kind != "sentence":
            assert answer[draft.start : draft.end] == draft.text  # offsets point at the claim in the answer
    return [(draft.kind, draft.text) for draft in drafts]


def test_numbers_names_quotes_and_sentences() -> None:
    answer = (
        'Alice moved 1,234.5 units on 2024-05-08 at 10:00:00 to "the north depot" via ZEBRA-4821. '
        "The service uses PostgreSQL and HTTP; see config.yaml and data_loader.py for Project Halcyon."
    )
    assert _kinds(answer) == [
        # A sentence first (by its own words: "Alice", "moved", "units"), then the claims inside it.
        ("sentence", 'Alice moved 1,234.5 units on 2024-05-08 at 10:00:00 to "the north depot" via ZEBRA-4821.'),
        ("number", "1,234.5"),
        ("number", "2024-05-08"),
        ("number", "10:00:00"),
        ("quote", "the north depot"),
        ("name", "ZEBRA-4821"),
        ("sentence", "The service uses PostgreSQL and HTTP; see config.yaml and data_loader.py for Project Halcyon."),
        ("name", "PostgreSQL"),
        ("name", "HTTP"),
        ("name", "config.yaml"),
        ("name", "data_loader.py"),
        ("name", "Project Halcyon"),
    ]


def test_what_is_not_a_claim() -> None:
    # Capitalised words starting sentences, list markers, e.g., apostrophes, sentences of one distinctive word.
    assert _kinds("1. Yes.\n2. No, e.g. never.\nIt's the service's.") == []
    # A one-word sentence start is an ordinary word; the same word inside a sentence is a name.
    assert _kinds("Deploy it on Friday with Bob.") == [("name", "Friday"), ("name", "Bob")]
    assert _kinds("-5% and +3 degrees") == [("number", "-5%"), ("number", "+3")]
    assert _kinds("v1.2.3 was the release") == [("name", "v1.2.3")]
    assert _kinds("alpha:4242 at https://example.com/a?b=1.") == [
        ("number", "4242"),
        ("name", "https://example.com/a?b=1"),
    ]


def test_a_very_long_answer_is_checked_up_to_a_bound() -> None:
    drafts, cut = split(" ".join(f"item-{n}" for n in range(MAX_CLAIMS + 50)))
    assert len(drafts) == MAX_CLAIMS and cut


def test_structured_answers_are_split_leaf_by_leaf_not_by_keys() -> None:
    value = {"password": "ZEBRA-4821", "rotations": 12, "owners": ["Alice", "the ops team"], "ok": True}
    answer = json.dumps(value, ensure_ascii=False, indent=2)
    drafts, cut = split_value(answer, value)
    assert [(d.kind, d.text) for d in drafts] == [
        ("name", "ZEBRA-4821"),
        ("number", "12"),
        ("name", "Alice"),
        ("sentence", "the ops team"),
    ]
    assert all(answer[d.start : d.end] == d.text for d in drafts) and not cut
    # Text that is not the value's JSON is split as text.
    assert [d.text for d in split_value("ZEBRA-4821 it is", value)[0]] == ["ZEBRA-4821"]


TEXT = (
    "the deploy key of the staging vault is KEY-7741 and it rotates every quarter\n"
    "the archive holds 5,120 reports written by the audit team in Lisbon\n"
    "the cold store number is 88-19-3 and nobody reads it\n"
)


def _tracker(*outputs: str, prompts: tuple[str, ...] = ()) -> SourceTracker:
    tracker = SourceTracker([{"id": "notes.txt", "text": TEXT}])
    for output in outputs:
        tracker.on_event(CellExecuted(run_id="r", iteration=1, index=1, code="", output=output, error=None, duration=0))
    for number, prompt in enumerate(prompts):
        ids: dict[str, Any] = {"run_id": "r", "call_id": f"c{number}", "batch_id": None, "model": "m"}
        tracker.on_event(SubCallStarted(**ids, batch_size=1, call_kind="llm_query", prompt=prompt))
        tracker.on_event(SubCallSent(**ids, call_kind="llm_query"))
    return tracker


def test_each_claim_is_supported_by_its_line_or_says_why_not() -> None:
    tracker = _tracker(TEXT.splitlines()[0], "reports counted: 4,096", prompts=(f"Check: {TEXT.splitlines()[1]}",))
    answer = (
        "The staging vault key is KEY-7741 and it rotates every quarter. The archive holds 5,120 reports. "
        "There are 4,096 reports in all. The cold store number is 88-19-3. Backups go to Oslo."
    )
    claims = {claim.text: claim for claim in tracker.findings(answer).claims}
    assert claims["KEY-7741"].supported and claims["KEY-7741"].source.location == "notes.txt:1"  # type: ignore[union-attr]
    assert claims["5,120"].supported and claims["5,120"].source.location == "notes.txt:2"  # type: ignore[union-attr]
    # Printed by the run's code, not input text: supported by that output only.
    assert (claims["4,096"].status, claims["4,096"].via, claims["4,096"].reason) == ("supported", "output", OWN_TEXT)
    assert claims["KEY-7741"].via == "input" and claims["88-19-3"].via is None
    assert claims["88-19-3"].reason == "in the input (notes.txt:3) but in no text that reached a model"
    assert claims["Oslo"].reason == NOWHERE
    sentence = claims["The staging vault key is KEY-7741 and it rotates every quarter."]
    assert sentence.kind == "sentence" and sentence.supported
    assert sentence.source is not None and sentence.source.line_start == 1
    assert "Backups go to Oslo." not in claims  # one distinctive word of its own ("Oslo" is a name claim)


def test_a_short_input_fragment_the_run_printed_supports_a_claim() -> None:
    # A regex group such as re.findall(r"is (KEY-\\d+)") prints the bare value: input text, shown to the model.
    tracker = _tracker("['KEY-7741']")
    [claim] = [c for c in tracker.findings("The key is KEY-7741.").claims if c.kind == "name"]
    assert claim.supported and claim.source is not None and claim.source.location == "notes.txt:1"


def test_a_document_name_is_input_and_a_computed_sentence_is_output() -> None:
    tracker = SourceTracker([{"id": "docs/a.md", "text": TEXT}, {"id": "docs/b.md", "text": TEXT.upper()}])
    for event in _cell_events_for("files: docs/a.md docs/b.md\nthe archive table lists reports written yearly"):
        tracker.on_event(event)
    claims = {
        c.text: c for c in tracker.findings("The files are docs/a.md and docs/b.md. Reports written yearly.").claims
    }
    assert claims["docs/b.md"].via == "input" and claims["docs/b.md"].source is not None
    assert claims["docs/b.md"].source.location == "docs/b.md"  # the document itself, by its name
    assert (claims["Reports written yearly."].status, claims["Reports written yearly."].via) == ("supported", "output")


def _cell_events_for(output: str) -> list[Any]:
    return [CellExecuted(run_id="r", iteration=1, index=1, code="", output=output, error=None, duration=0)]


def test_a_number_must_stand_alone_to_match() -> None:
    tracker = _tracker(TEXT)
    claims = {c.text: c for c in tracker.findings("The archive holds 120 reports and 5,12 more.").claims}
    assert not claims["120"].supported and not claims["5,12"].supported  # neither is 5,120
