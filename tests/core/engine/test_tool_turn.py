"""One turn's calls of the caller's tools: reading CALL_TOOL lines, bounding what model code sends, settling."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters.core.engine.tool_calls import MAX_TURN_ARGS_CHARS, ToolDefinition, check_arguments, offer_tools
from rlm_adapters.core.engine.tool_turn import MAX_TOOL_CALL_RETRIES, TurnCalls, parse_arguments
from rlm_adapters.core.sandbox import CallError

NOTE = ToolDefinition("note", "Write a note.", {"type": "object", "properties": {"text": {"type": "string"}}})


def turn(**options: Any) -> TurnCalls:
    offer = offer_tools([NOTE], **options)
    assert offer is not None
    calls = TurnCalls(offer)
    calls.accepting = True
    return calls


def never_quoted(line: str) -> bool:
    return False


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("   ", {}),
        (' {"text": "a } brace"}', {"text": "a } brace"}),
        (' {"text": "line\\nbreak", "n": [1, {"k": null}]}', {"text": "line\nbreak", "n": [1, {"k": None}]}),
        (" {'text': 'it\\'s', 'ok': True}", {"text": "it's", "ok": True}),
        (' {"text":\n  "spans lines"\n}', {"text": "spans lines"}),
    ],
)
def test_arguments_of_a_call_line(text: str, expected: dict[str, Any]) -> None:
    assert parse_arguments(text, 0) == (expected, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (" text=hello", "give its arguments as one JSON object"),
        (' {"text": "never closed', "not one JSON object"),
        (" {'text': open('/etc/passwd').read()}", "not one JSON object"),  # a literal, never code
        (" " + "{" * 5000 + "}" * 5000, "not one JSON object"),
    ],
)
def test_arguments_that_are_not_an_object_are_a_problem(text: str, problem: str) -> None:
    value, found = parse_arguments(text, 0)
    assert found is not None and problem in found
    assert len(str(value)) <= 200


def test_check_arguments_walks_once_and_stops_early() -> None:
    assert check_arguments({"a": [1, 2.5, None, True, {"b": "c"}]})[2] is None
    assert "which JSON cannot carry" in str(check_arguments({"a": float("nan")})[2])
    assert "is not JSON data" in str(check_arguments({"a": {1, 2}})[2])
    assert "key that is not a string" in str(check_arguments({"a": {1: 2}})[2])
    huge = {"a": ["x" * 1000] * 10_000}  # 10 MB of JSON, refused after the first megabyte
    assert "longer than 1,000 characters" in str(check_arguments(huge, 1_000)[2])
    assert check_arguments(10**5000)[2] is not None  # not a dict: refused without writing its digits


def test_calls_outside_a_running_cell_are_refused() -> None:
    calls = turn()
    calls.accepting = False  # a thread of model code that outlived its cell
    with pytest.raises(CallError, match="only inside a running cell"):
        calls.add("note", {"text": "late"})
    assert not calls.made


def test_a_turn_holds_a_bounded_amount_of_arguments() -> None:
    calls = turn()
    piece = "x" * 900_000
    for _ in range(MAX_TURN_ARGS_CHARS // 900_000 + 2):
        calls.add("note", {"text": piece})
    assert len(calls.accepted) == MAX_TURN_ARGS_CHARS // 900_000
    assert "longer than" in calls.rejected[0].error and calls.rejected[0].args is None


async def test_retries_are_counted_across_turns_and_then_the_calls_come_back() -> None:
    calls = turn()
    for attempt in range(MAX_TOOL_CALL_RETRIES):
        calls.add("note", {"text": 1})
        settled = await calls.settle(False)
        assert settled.action == "retry" and "args['text']: 1 is not of type 'string'" in settled.message
        assert not calls.made and calls.retries == attempt + 1
    calls.add("note", {"text": 1})
    assert (await calls.settle(False)).action == "finish"
    assert calls.accepted == [] and len(calls.rejected) == 1


async def test_a_turn_without_calls_goes_on_and_says_what_it_ignored() -> None:
    calls = turn()
    calls.add_text('CALL_TOOL note {"text": "planted"}', lambda line: "planted" in line)
    settled = await calls.settle(False)
    assert settled.action == "none" and "was not taken as a call" in settled.message
    assert (await calls.settle(True)).action == "none"  # an answer with tool_choice auto is fine


async def test_many_broken_call_lines_in_a_long_reply_are_read_once_each() -> None:
    """Each line's fallback scan for a closing brace is bounded, so a hostile reply costs little."""
    calls = turn()
    line = "CALL_TOOL note {'text': 'never closed\n"
    reply = line * 70 + "x" * 500_000
    calls.add_text(reply, never_quoted)
    assert len(calls.rejected) == 64 and all("not one JSON object" in c.error for c in calls.rejected)
    settled = await calls.settle(False)
    assert settled.action == "retry" and "- more than 64 calls were made" in settled.message
