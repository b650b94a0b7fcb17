"""Port of the reference's REPL basics (tests/test_local_repl.py: TestLocalREPLBasic, Persistence,
Builtins, Context) through `RLM`, in the trusted and the isolated sandbox."""

from __future__ import annotations

import pytest

from .helpers import by_turn, final, make

KINDS = ["local", "subprocess"]


def feedback(environment: str, *cells: str, context: object = "c") -> list[str]:
    """What the root model was shown after each of `cells`."""
    root = by_turn(*(f"```repl\n{cell}\n```" for cell in cells), final("done"))
    make(root, environment=environment).completion(context)
    return [root.calls[i + 1][-1]["content"] for i in range(len(cells))]


@pytest.mark.parametrize("environment", KINDS)
def test_output_errors_and_syntax_errors(environment: str) -> None:
    printed, error, syntax = feedback(environment, "print('Hello, World!')", "1 / 0", "def broken(")
    assert "Hello, World!" in printed
    assert "ZeroDivisionError" in error and "SyntaxError" in syntax


@pytest.mark.parametrize("environment", KINDS)
def test_variables_functions_and_imports_persist(environment: str) -> None:
    shown = feedback(
        environment,
        "x = 42\ndef greet(name):\n    return f'Hello, {name}!'\nsquares = [v**2 for v in range(5)]\nimport math",
        "y = x + 8\nprint(y, greet('World'), sum(squares), round(math.pi, 3), sorted([3, 1, 2]))",
    )
    assert "50 Hello, World! 30 3.142 [1, 2, 3]" in shown[1]


@pytest.mark.parametrize(
    ("context", "expected"),
    [("plain text", "str 10"), ({"key": "value"}, "dict 1"), (["a", "b", "c"], "list 3")],
)
def test_context_types(context: object, expected: str) -> None:
    (shown,) = feedback("local", "print(type(context).__name__, len(context))", context=context)
    assert expected in shown


def test_show_vars_lists_user_variables_only() -> None:
    (shown,) = feedback("local", "alpha = 1\nbeta = 'two'\nSHOW_VARS()")
    assert "alpha: int" in shown and "beta: str" in shown
    assert "llm_query" not in shown.split("REPL variables")[0]
