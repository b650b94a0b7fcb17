"""Port of the reference's parsing tests (tests/test_parsing.py::TestFindCodeBlocks,
TestConvertContextForRepl) through `RLM`: which fences run, and how message-list prompts are read."""

from __future__ import annotations

import pytest

from rlm_adapters import ConfigurationError

from .helpers import by_turn, final, make

TWO_KINDS = "Python block:\n```python\nran.append('python')\n```\nREPL block:\n```repl\nran.append('repl')\n```\n"
SETUP = "```repl\nran = []\n```"
SHOW = "```repl\nprint('ran:', ran)\n```"


def test_multiple_repl_blocks_run_in_order() -> None:
    root = by_turn("First:\n```repl\na = 1\n```\nSecond:\n```repl\nb = a + 1\nprint(b)\n```\nEnd.", final("x"))
    make(root).completion("c")
    assert "[block 2 output]\n2" in root.calls[1][-1]["content"]


def test_no_code_blocks_gets_a_nudge() -> None:
    root = by_turn("Just plain text without any code blocks.", final("x"))
    make(root).completion("c")
    assert root.calls[1][-1]["content"].startswith("No code ran")


@pytest.mark.parametrize(("fences", "expected"), [("any", "['python', 'repl']"), ("repl", "['repl']")])
def test_which_fences_run_is_one_switch(fences: str, expected: str) -> None:
    root = by_turn(SETUP, TWO_KINDS, SHOW, final("x"))
    make(root, code_fences=fences).completion("c")
    assert f"ran: {expected}" in root.calls[3][-1]["content"]
    rule = "only ```repl fences run" if fences == "repl" else "```python (or ```py / ```python3) and bare"
    assert rule in root.calls[0][0]["content"]  # the prompt states the same rule


def test_bad_fence_option() -> None:
    with pytest.raises(ConfigurationError, match="code_fences='python' must be 'any' or 'repl'"):
        make(by_turn("x"), code_fences="python")


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Hello world", "'Hello world'"),
        ({"key": "value"}, "{'key': 'value'}"),
        (["a", "b", "c"], "['a', 'b', 'c']"),
        ([{"content": "Hello"}, {"content": "World"}], "['Hello', 'World']"),
    ],
)
def test_context_shapes_as_the_reference_loads_them(prompt: object, expected: str) -> None:
    root = by_turn("```repl\nprint(repr(context))\n```", final("x"))
    make(root).completion(prompt)
    assert expected in root.calls[1][-1]["content"]
