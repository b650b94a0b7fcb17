"""Typed answers at the engine level: ``output_schema`` as a Pydantic model, a dataclass, a TypedDict or a JSON
schema; FINAL_VAR of a dict validated directly; an invalid value sent back with what is wrong, up to the limit."""

from __future__ import annotations

import dataclasses
from typing import Any

import pydantic
import pytest
from typing_extensions import TypedDict

from rlm_adapters import RLM, Message, ScriptedModel
from rlm_adapters.core import json_schema
from rlm_adapters.core.output import OutputSchema
from rlm_adapters.core.sandbox import FinalAnswer
from rlm_adapters.errors import ConfigurationError, RLMRunFailed


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0)


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Movie(TypedDict):
    title: str
    year: int


PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def replies(*turns: str) -> tuple[ScriptedModel, list[list[Message]]]:
    seen: list[list[Message]] = []

    def reply(messages: list[Message]) -> str:
        seen.append(list(messages))
        return turns[min(sum(m["role"] == "assistant" for m in messages), len(turns) - 1)]

    return ScriptedModel(reply), seen


def run(model: ScriptedModel, schema: Any, **kwargs: Any) -> Any:
    return RLM(backend=model, environment="local").completion("Ada is 36.", "Who?", output_schema=schema, **kwargs)


@pytest.mark.parametrize(
    ("schema", "code", "expected"),
    [
        (Person, 'answer = {"name": "Ada", "age": 36}', Person(name="Ada", age=36)),
        (Point, 'answer = {"x": 1, "y": 2.5}', Point(1.0, 2.5)),
        (Movie, 'answer = {"title": "Up", "year": 2009}', {"title": "Up", "year": 2009}),
        (PERSON_SCHEMA, 'answer = {"name": "Ada", "age": 36}', {"name": "Ada", "age": 36}),
        ({"type": "array", "items": {"type": "integer"}}, "answer = [1, 2, 3]", [1, 2, 3]),
    ],
    ids=["pydantic", "dataclass", "typeddict", "json-schema", "list"],
)
def test_a_valid_final_var_becomes_the_typed_value(schema: Any, code: str, expected: Any) -> None:
    model, seen = replies(f'```repl\n{code}\nFINAL_VAR("answer")\n```')
    result = run(model, schema)
    assert result.finish_reason == "final", result.error
    assert result.value == expected and type(result.value) is type(expected)
    assert seen[0][0]["role"] == "system" and "matching this JSON schema" in seen[0][0]["content"]
    assert result.to_dict()["value"] == dataclasses.asdict(expected) if dataclasses.is_dataclass(expected) else True


def test_a_final_text_holding_json_is_read_as_the_value() -> None:
    model, _ = replies('FINAL({"name": "Ada", "age": 36})')
    assert run(model, Person).value == Person(name="Ada", age=36)
    model, _ = replies("FINAL(just words)")
    assert run(model, {"type": "string", "minLength": 3}).value == "just words"


def test_an_invalid_value_goes_back_with_the_problem_then_a_valid_one_wins() -> None:
    model, seen = replies(
        '```repl\nFINAL_VAR({"name": "Ada", "age": -1})\n```', '```repl\nFINAL_VAR({"name": "Ada", "age": 36})\n```'
    )
    result = run(model, Person)
    assert (result.finish_reason, result.value) == ("final", Person(name="Ada", age=36))
    feedback = seen[1][-1]["content"]
    assert (
        "Your final answer was rejected" in feedback and "age: Input should be greater than or equal to 0" in feedback
    )


def test_after_the_retries_the_run_fails_with_the_last_value() -> None:
    bad = '```repl\nFINAL_VAR({"name": "Ada", "age": "old"})\n```'
    model, seen = replies(bad)
    with pytest.raises(RLMRunFailed) as caught:
        run(model, PERSON_SCHEMA, output_retries=2)
    result = caught.value.result
    assert result.finish_reason == "error" and result.value is None
    assert result.final_value == {"name": "Ada", "age": "old"}  # the last value, for the caller to inspect
    assert "invalid after 3 tries" in (result.error or "") and "value['age'] should be integer" in (result.error or "")
    assert len(seen) == 3  # the first answer and two retries
    model, seen = replies(bad)
    with pytest.raises(RLMRunFailed, match="invalid after 1 tries"):
        run(model, PERSON_SCHEMA, output_retries=0)
    assert len(seen) == 1


def test_the_callers_own_validator_runs_after_the_schema() -> None:
    model, seen = replies('FINAL({"name": "Bob", "age": 3})', 'FINAL({"name": "Ada", "age": 36})')
    result = RLM(backend=model, environment="local").completion(
        "c", "q", output_schema=Person, final_validator=lambda f: None if "Ada" in f.text else "the name is wrong"
    )
    assert result.value == Person(name="Ada", age=36) and "the name is wrong" in seen[1][-1]["content"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (int, "must be a Pydantic model, a dataclass, a TypedDict or a JSON schema dict"),
        ({"type": "object", "if": {}}, "the keyword 'if' is not supported"),
        ({"type": "strng"}, "type='strng' must be one of"),
        ({"$ref": "#/$defs/Missing"}, "$ref '#/$defs/Missing' names nothing in the schema"),
        ({"$ref": "http://example.com/schema"}, "is not a reference inside this schema"),
        ({"properties": {"a": {"pattern": "("}}}, "is not a regular expression"),
        ({"type": "array", "minItems": -1}, "minItems=-1 must be a whole number >= 0"),
    ],
)
def test_a_schema_that_cannot_be_enforced_is_refused_before_the_run(schema: Any, message: str) -> None:
    model, seen = replies("FINAL(x)")
    with pytest.raises(ConfigurationError, match="output_schema") as caught:
        run(model, schema)
    assert message in str(caught.value) and seen == []
    with pytest.raises(ConfigurationError, match="output_retries=-1 must be an integer >= 0"):
        run(model, PERSON_SCHEMA, output_retries=-1)


def test_hostile_values_and_self_referring_schemas_end_in_a_problem_not_a_crash() -> None:
    for endless in (
        {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    ):  # refused before the run (issue 48): a check of one value against them would never end
        with pytest.raises(ConfigurationError, match="applies itself to the same value"):
            OutputSchema.of(endless)
    deep: Any = 0
    for _ in range(5000):
        deep = [deep]
    tree = OutputSchema.of(
        {"$defs": {"n": {"type": ["array", "integer"], "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"}
    )
    assert "nested too deeply" in (tree.parse(FinalAnswer("[]", deep))[1] or "")
    many = OutputSchema.of({"type": "array", "items": {"type": "string"}})
    problem = many.parse(FinalAnswer("[]", list(range(10_000))))[1] or ""
    assert problem.count("should be string") == 8  # the model is shown a few lines, not ten thousand


def test_json_schema_keywords_are_enforced() -> None:
    schema = OutputSchema.of(
        {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": True, "maxItems": 2},
                "score": {"type": "number", "exclusiveMaximum": 1, "multipleOf": 0.25},
                "id": {"type": "string", "pattern": "^[a-z]+-\\d+$"},
                "kind": {"const": "x"},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}]},
            },
            "patternProperties": {"^x_": {"type": "integer"}},
            "additionalProperties": False,
            "oneOf": [{"required": ["id"]}, {"required": ["kind"]}],
        }
    )
    good = {"tags": ["a"], "score": 0.75, "id": "ab-1", "pair": ["s", True], "x_n": 3}
    assert schema.parse(FinalAnswer("", good)) == (good, None)
    bad = {"tags": ["a", "a", "c"], "score": 1.1, "id": "AB", "kind": "y", "pair": [1, "t"], "x_n": 1.5, "z": 1}
    problem = "; ".join(json_schema.problems(bad, schema.json_schema))
    for part in (
        "repeats the item 'a'",
        "'c' is not one of",
        "at most 2 are allowed",
        "must be < 1",
        "must be a multiple of 0.25",
        "does not match the pattern",
        "must be 'x'",
        "value['pair'][0] should be string",
        "value['x_n'] should be integer",
        "the key 'z', which the schema does not allow",
        "matches more than one of the allowed types",
    ):
        assert part in problem, part
