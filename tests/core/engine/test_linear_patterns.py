"""Issue 35, item 2: a caller's JSON schema ``pattern`` matched against a value model code chooses.

``^(a+)+$`` against ``'a' * 26 + '!'`` held the host's event loop for 10 s under Python's backtracking `re`
(inside a run with ``timeout=5``; other MCP clients waited). Patterns now run on RE2 (linear time), what RE2
cannot run is refused before the run, and the answer is checked on a thread under the run's deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from rlm_adapters import RLM, Message, ScriptedModel
from rlm_adapters.core import json_schema
from rlm_adapters.core.engine.tool_calls import offer_tools
from rlm_adapters.core.output import OutputSchema
from rlm_adapters.core.sandbox import FinalAnswer
from rlm_adapters.errors import ConfigurationError, RLMRunFailed

EVIL = "^(a+)+$"
# 2**32 backtracking steps for `re`: hours. RE2 answers at once.
EVIL_VALUE = "a" * 32 + "!"


def scripted(code: str) -> ScriptedModel:
    def reply(messages: list[Message]) -> str:
        return f"```repl\n{code}\n```"

    return ScriptedModel(reply)


def _timed(check: Any, rounds: int = 200) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        check()
    return time.perf_counter() - started


@pytest.mark.timeout(60)
def test_an_exponential_pattern_is_matched_in_linear_time() -> None:
    schema = json_schema.check_schema({"type": "string", "pattern": EVIL})
    found = json_schema.problems(EVIL_VALUE, schema)
    assert found and "does not match the pattern" in found[0]
    # Ratio to a baseline of the same length and pattern that no engine finds hard (no trailing mismatch).
    evil = _timed(lambda: json_schema.problems(EVIL_VALUE, schema))
    plain = _timed(lambda: json_schema.problems("a" * 33, schema))
    assert evil < 20 * plain + 0.05, (evil, plain)


@pytest.mark.timeout(60)
def test_pattern_properties_and_keys_are_matched_in_linear_time() -> None:
    schema = json_schema.check_schema(
        {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False}
    )
    found = json_schema.problems({EVIL_VALUE: 1, "aaa": "x"}, schema)
    assert any("does not allow" in line and "!" in line for line in found)
    assert any("should be integer" in line for line in found)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"(a)\1", "cannot be matched in linear time"),
        ("(?=a)b", "cannot be matched in linear time"),
        ("(?<!a)b", "cannot be matched in linear time"),
        ("(", "is not a regular expression"),
        ("(?:a{1000}){1000}", "cannot be matched in linear time"),  # past RE2's memory bound
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_naming_it(pattern: str, expected: str) -> None:
    for schema in ({"pattern": pattern}, {"patternProperties": {pattern: {}}}):
        with pytest.raises(ConfigurationError) as caught:
            OutputSchema.of({"type": "object", "properties": {"x": schema}})
        assert expected in str(caught.value) and repr(pattern) in str(caught.value)
        assert "\n" not in str(caught.value)


def test_patterns_keep_their_meaning() -> None:
    schema = json_schema.check_schema({"type": "string", "pattern": r"^\d{3}-[a-z]+\b"})
    assert json_schema.problems("123-abc", schema) == []
    assert json_schema.problems("12-abc", schema)
    unicode = json_schema.check_schema({"type": "string", "pattern": "^.{4}$"})
    assert json_schema.problems("café", unicode) == []  # one character, not two bytes
    # A lone surrogate from model code is matched (as one character, like `re`), not an encoding error.
    assert json_schema.problems("ab\ud800c", unicode) == []
    assert json_schema.problems("ab\ud800cd", unicode)


@pytest.mark.timeout(60)
def test_a_run_with_the_reproduction_ends_at_once_with_the_problem() -> None:
    model = scripted(f'answer = "{EVIL_VALUE}"\nFINAL_VAR("answer")')
    with pytest.raises(RLMRunFailed, match="does not match the pattern") as caught:
        RLM(backend=model, environment="local", timeout=30).completion(
            "x", "?", output_schema={"type": "string", "pattern": EVIL}, output_retries=0
        )
    assert caught.value.result.finish_reason == "error"


async def test_the_answer_is_checked_off_the_event_loop() -> None:
    """Count-based: the check waits for three heartbeats of the event loop, which only come if it is not on it."""
    beats = 0
    beaten = threading.Event()
    on_loop: list[bool] = []

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            await asyncio.sleep(0)
            beats += 1
            if beats >= 3:
                beaten.set()

    def validator(final: FinalAnswer) -> str | None:
        started = beats
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)
        beaten.clear()
        # On the loop no heartbeat could come: the wait would run out and the answer be refused.
        return None if beaten.wait(30) and beats > started else "the event loop was held"

    beat = asyncio.create_task(heartbeat())
    try:
        result = await RLM(backend=scripted('FINAL("42")'), environment="local").acompletion(
            "x", "?", final_validator=validator
        )
    finally:
        beat.cancel()
    assert on_loop == [False]
    assert result.finish_reason == "final" and result.response == "42"


async def test_a_check_that_outlasts_the_deadline_ends_the_run_with_timeout_and_keeps_the_answer() -> None:
    release = threading.Event()

    def slow(final: FinalAnswer) -> str | None:
        release.wait(30)
        return None

    try:
        result = await RLM(backend=scripted('FINAL("kept")'), environment="local", timeout=1).acompletion(
            "x", "?", final_validator=slow
        )
    finally:
        release.set()
    assert result.finish_reason == "timeout"
    assert result.response == "kept"


def test_the_typed_value_is_the_one_checked_once() -> None:
    calls: list[str] = []

    def also(final: FinalAnswer) -> str | None:
        calls.append(final.text)
        return None

    model = scripted('answer = {"n": 3}\nFINAL_VAR("answer")')
    result = RLM(backend=model, environment="local").completion(
        "x", "?", output_schema={"type": "object", "properties": {"n": {"type": "integer"}}}, final_validator=also
    )
    assert result.value == {"n": 3}
    assert len(calls) == 1


@pytest.mark.timeout(60)
def test_tool_arguments_are_matched_in_linear_time() -> None:
    pytest.importorskip("jsonschema", reason="tool calling needs jsonschema (the tools extra)")
    offer = offer_tools(
        [
            {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string", "pattern": EVIL}},
                    "patternProperties": {"^(b+)+$": {"type": "integer"}},
                    "additionalProperties": False,
                },
            }
        ]
    )
    assert offer is not None
    found = offer.problems("lookup", {"q": EVIL_VALUE, "b" * 32 + "!": 1, "bb": "x"})
    assert any("does not match" in line for line in found)
    assert any("Additional properties" in line for line in found)
    assert any("'bb'" in line and "integer" in line for line in found)
    assert offer.problems("lookup", {"q": "aaa", "bbb": 2}) == []


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "(?=a)"}}},
        {"type": "object", "patternProperties": {r"(x)\1": {}}},
        {"type": "object", "patternProperties": {"a": {}}, "unevaluatedProperties": False},
    ],
)
def test_a_tool_schema_with_a_pattern_re2_cannot_run_is_refused(parameters: dict[str, Any]) -> None:
    pytest.importorskip("jsonschema", reason="tool calling needs jsonschema (the tools extra)")
    with pytest.raises(ConfigurationError, match="tools: the parameters of 'lookup'"):
        offer_tools([{"name": "lookup", "parameters": parameters}])


def test_a_pattern_inside_a_default_is_data_not_a_keyword() -> None:
    pytest.importorskip("jsonschema", reason="tool calling needs jsonschema (the tools extra)")
    parameters = {"type": "object", "properties": {"r": {"type": "object", "default": {"pattern": "(?=a)"}}}}
    assert offer_tools([{"name": "lookup", "parameters": parameters}]) is not None
