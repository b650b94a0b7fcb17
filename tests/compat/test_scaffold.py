"""Port of the reference's scaffold-restoration tests (tests/test_local_repl.py::
TestLocalREPLScaffoldRestoration, tests/test_rlm_query.py::TestRlmQueryScaffoldRestoration)."""

from __future__ import annotations

import pytest

from .helpers import by_turn, final, make


@pytest.mark.parametrize("environment", ["local", "subprocess"])
def test_context_restored_after_overwrite_and_user_variables_stay(environment: str) -> None:
    root = by_turn(
        "```repl\ncontext = context.split()\nwords = len(context)\nprint(type(context).__name__)\n```",
        "```repl\nprint(type(context).__name__, repr(context), words)\n```",
        final("done"),
    )
    make(root, environment=environment).completion("a b c")
    assert "list" in root.calls[1][-1]["content"]  # within the cell the rebinding holds
    assert "str 'a b c' 3" in root.calls[2][-1]["content"]  # the next cell sees the real context again


@pytest.mark.parametrize(
    "name", ["llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "FINAL", "FINAL_VAR", "SHOW_VARS"]
)
def test_repl_functions_restored_after_overwrite(name: str) -> None:
    root = by_turn(
        f"```repl\n{name} = 'clobbered'\n```",
        f"```repl\nprint(callable({name}))\n```",
        final("done"),
    )
    make(root).completion("c")
    assert "True" in root.calls[2][-1]["content"]


def test_tools_restored_and_answer_rewrapped() -> None:
    root = by_turn(
        "```repl\nlookup = None\nanswer = {'content': 'partial'}\n```",
        "```repl\nprint(lookup('k'), type(answer).__name__, answer['content'])\n```",
        '```repl\nanswer["ready"] = True\n```',
    )
    result = make(root, custom_tools={"lookup": lambda key: f"value of {key}"}).completion("c")
    assert "value of k AnswerDict partial" in root.calls[2][-1]["content"]
    assert result.response == "partial"


def test_prompt_alias_restored() -> None:
    root = by_turn("```repl\nprompt = 'x'\n```", "```repl\nprint(prompt == context)\n```", final("d"))
    make(root).completion("the context")
    assert "True" in root.calls[2][-1]["content"]
