"""Reading a reply defensively: text parts, refusals by name, token counts that are not counts (`_reply.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.lm._reply import MAX_TOKEN_COUNT, checked_response, reading, reply_text, token_count
from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.errors import ModelError, RLMRunFailed

SOURCE = "Test call to model 'm'"


def text(content: Any) -> str:
    return reply_text(content, source=SOURCE, model="m")


def test_text_and_text_parts_are_joined_and_thinking_is_skipped() -> None:
    assert text("plain") == "plain"
    assert text(None) == ""
    assert text([{"type": "text", "text": "a"}, {"type": "output_text", "text": "b"}, "c"]) == "abc"
    assert text([{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "answer"}]) == "answer"
    assert text([{"reasoningContent": {"reasoningText": {"text": "hm"}}}, {"text": "bedrock"}]) == "bedrock"
    assert text([{"text": "thought", "thought": True}, {"text": "gemini"}]) == "gemini"
    assert text([{"type": "refusal", "refusal": "I will not"}]) == "I will not"


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (5, "int 5"),
        ({"text": "x"}, "dict {'text': 'x'}"),
        ([{"type": "image_url", "image_url": {}}], "image_url"),
        ([{"type": "text", "text": 7}], "'text': 7"),
        ([3.5], "float 3.5"),
        ("x" * 0 or ["y" * 1000, {"type": "tool_use"}], "tool_use"),
    ],
)
def test_anything_else_is_a_model_error_naming_what_came(content: Any, named: str) -> None:
    with pytest.raises(ModelError, match=SOURCE) as info:
        text(content)
    assert named in str(info.value)
    assert len(str(info.value)) < 500  # the value is cut, however long


@pytest.mark.parametrize(
    ("value", "count"),
    [(12, 12), (12.0, 12), (0, 0), (MAX_TOKEN_COUNT, MAX_TOKEN_COUNT), (-1, None), (1.5, None), ("12", None)],
)
def test_token_counts_that_are_not_counts_are_none(value: Any, count: int | None) -> None:
    assert token_count(value) == count


def test_huge_nan_and_bool_counts_are_none() -> None:
    assert token_count(10**400) is None
    assert token_count(float("nan")) is None
    assert token_count(float("inf")) is None
    assert token_count(True) is None


def test_reading_turns_any_error_into_a_model_error_but_lets_rlm_errors_pass() -> None:
    with pytest.raises(ModelError, match=r"could not be read \(RecursionError: deep\)"), reading(SOURCE, "m"):
        raise RecursionError("deep")
    mine = ModelError("mine", model="m")
    with pytest.raises(ModelError) as info, reading(SOURCE, "m"):
        raise mine
    assert info.value is mine


def test_a_checked_response_replaces_what_is_not_a_count() -> None:
    odd = LMResponse(text="four words of text", input_tokens=-3, output_tokens="9", model="", cost=float("nan"))  # type: ignore[arg-type]
    fixed = checked_response(odd, model="m", input_estimate=42)
    assert (fixed.input_tokens, fixed.model, fixed.cost) == (42, "m", None)
    assert isinstance(fixed.output_tokens, int) and fixed.output_tokens > 0
    good = LMResponse(text="t", input_tokens=1, output_tokens=1, model="m")
    assert checked_response(good, model="m", input_estimate=1) is good
    with pytest.raises(ModelError, match="not a string: int 5"):
        checked_response(LMResponse(text=5, input_tokens=1, output_tokens=1, model="m"), model="m", input_estimate=1)  # type: ignore[arg-type]
    with pytest.raises(ModelError, match="not an LMResponse"):
        checked_response("text", model="m", input_estimate=1)


@pytest.mark.parametrize("reply", [5, ["a", "list"], None, {"text": "dict"}], ids=["int", "list", "none", "dict"])
def test_a_client_returning_text_that_is_not_a_string_ends_the_run_with_error(reply: Any) -> None:
    client = ScriptedModel(lambda _m: LMResponse(text=reply, input_tokens=1, output_tokens=1, model="x"))
    with pytest.raises(RLMRunFailed, match="not a string") as caught:
        RLM(backend=client, environment="local", max_iterations=2).completion("ctx", "q")
    assert caught.value.result.finish_reason == "error"
