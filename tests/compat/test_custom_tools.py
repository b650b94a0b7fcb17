"""Port of the reference's custom-tool tests (tests/repl/test_custom_tools.py,
tests/test_depth_metadata.py::TestSubcallCustomToolsPropagation), plus the sandbox-boundary encoding."""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Any

import pytest

from rlm_adapters import ConfigurationError, Message, ScriptedModel
from rlm_adapters.core.lm.scripted import Reply

from .helpers import by_turn, final, make

REFERENCE_RESERVED = [
    "llm_query",
    "llm_query_batched",
    "rlm_query",
    "rlm_query_batched",
    "SHOW_VARS",
    "answer",
    "context",
    "history",
]


@pytest.mark.parametrize("name", REFERENCE_RESERVED)
def test_reserved_names_rejected(name: str) -> None:
    with pytest.raises(ValueError, match=repr(name)):
        make(by_turn("x"), custom_tools={name: len})


def test_multiple_reserved_names_all_reported() -> None:
    with pytest.raises(ConfigurationError) as caught:
        make(by_turn("x"), custom_tools={"answer": 1, "history": 2, "fine": 3})
    assert "['answer', 'history']" in str(caught.value)


@pytest.mark.parametrize("environment", ["local", "subprocess"])
def test_callable_and_value_tools_are_available_and_persist(environment: str) -> None:
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def __call__(self, step: int = 1) -> int:
            self.n += step
            return self.n

    prefix = "pre-"
    tools: dict[str, Any] = {
        "add": lambda a, b: a + b,
        "tag": lambda text: prefix + text,  # a closure
        "count": Counter(),  # a callable instance
        "nothing": lambda: None,
        "CONFIG": {"mode": "fast", "retries": 3},
        "GREETING": "hello",
    }
    root = by_turn(
        "```repl\nprint(add(2, 3), tag('x'), count(), nothing(), CONFIG['mode'], GREETING)\n```",
        "```repl\nprint(count(5), add('a', 'b'), len(context))\n```",
        final("done"),
    )
    make(root, environment=environment, custom_tools=tools).completion("four")
    assert "5 pre-x 1 None fast hello" in root.calls[1][-1]["content"]
    assert "6 ab 4" in root.calls[2][-1]["content"]


def test_tool_that_raises_surfaces_in_model_code() -> None:
    def broken(_: Any) -> None:
        raise RuntimeError("tool broke")

    root = by_turn("```repl\ntry:\n    broken(1)\nexcept Exception as exc:\n    print('caught', exc)\n```", final("d"))
    make(root, custom_tools={"broken": broken}).completion("c")
    assert "caught tool 'broken' failed: RuntimeError: tool broke" in root.calls[1][-1]["content"]


def test_tools_and_values_are_described_in_the_system_prompt() -> None:
    tools = {
        "calc": {"tool": lambda x: x, "description": "Performs arithmetic"},
        "plain": lambda: 1,
        "LIMIT": {"tool": 10, "description": "Maximum items"},
        "NAMES": ["a", "b"],
    }
    root = by_turn(final("x"))
    make(root, custom_tools=tools).completion("c")
    system = root.calls[0][0]["content"]
    assert "`calc`: Performs arithmetic" in system and "`plain`: a host-side function." in system
    assert "`LIMIT`: Maximum items" in system and "`NAMES`: a list value." in system


@pytest.mark.parametrize(("sub_tools", "expected"), [(None, "True True"), ({}, "False False")])
def test_sub_tools_inherit_custom_tools_when_none(sub_tools: dict[str, Any] | None, expected: str) -> None:
    def model(messages: list[Message]) -> Reply:
        if "Child" in messages[1]["content"]:
            return "```repl\nFINAL(str('helper' in globals()) + ' ' + str('LIMIT' in globals()))\n```"
        return "```repl\nFINAL(rlm_query('Child task', context='x'))\n```"

    rlm = make(
        ScriptedModel(model, model_name="m"),
        max_depth=2,
        custom_tools={"helper": lambda: 1, "LIMIT": 5},
        custom_sub_tools=sub_tools,
    )
    assert rlm.completion("c").response == expected


@pytest.mark.parametrize("environment", ["local", "subprocess"])
def test_non_json_values_cross_the_boundary_faithfully(environment: str) -> None:
    seen: list[Any] = []

    def inspect(value: Any) -> Any:
        seen.append(value)
        return {"echo": value, "when": datetime.date(2024, 1, 2), "ids": {3, 1, 2}, (1, 2): b"\x00raw"}

    code = (
        "```repl\nr = inspect({'tags': {'a', 'b'}, 'pair': (1, 'x'), 'at': START})\n"
        "print(sorted(r['ids']), r['when'].year, r[(1, 2)], type(r['echo']['pair']).__name__, "
        "type(START).__name__, PRICE + 1)\n```"
    )
    values = {"START": datetime.datetime(2024, 5, 6, 7, 8), "PRICE": decimal.Decimal("1.10")}
    root = by_turn(code, final("d"))
    make(root, environment=environment, custom_tools={"inspect": inspect, **values}).completion("c")
    assert "[1, 2, 3] 2024 b'\\x00raw' tuple datetime 2.10" in root.calls[1][-1]["content"]
    assert seen == [{"tags": {"a", "b"}, "pair": (1, "x"), "at": values["START"]}]


@dataclass
class Point:
    x: int
    y: int


def test_values_that_cannot_cross_fail_with_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match=r"custom_tools\['ORIGIN'\]: the Point value Point\(x=0, y=0\)"):
        make(by_turn("x"), custom_tools={"ORIGIN": Point(0, 0)})

    root = by_turn("```repl\ntry:\n    where()\nexcept Exception as exc:\n    print(exc)\n```", final("d"))
    make(root, environment="subprocess", custom_tools={"where": lambda: Point(1, 2)}).completion("c")
    feedback = root.calls[1][-1]["content"]
    assert "the return value of where(): the Point value Point(x=1, y=2) cannot cross" in feedback
    assert "dataclasses.asdict" in feedback


def test_unencodable_arguments_fail_in_model_code() -> None:
    root = by_turn("```repl\ntry:\n    echo(object)\nexcept TypeError as exc:\n    print(exc)\n```", final("d"))
    make(root, custom_tools={"echo": lambda v: v}).completion("c")
    assert "an argument of echo(): the type value <class 'object'> cannot cross" in root.calls[1][-1]["content"]
