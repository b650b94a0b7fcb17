import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rlm_adapters.core.sandbox.programs.worker import ROUTING, BudgetExhaustedError, CallFailed, Repl, finals


@pytest.fixture(autouse=True)
def host_streams_back() -> Iterator[None]:
    """A `Repl` run in this process routes its streams (as the worker program does, for good): undo it."""
    yield
    ROUTING.reset()


def echo_call(kind: str, args: dict[str, Any]) -> Any:
    if kind == "llm_query_batched":
        return [f"re:{p}" for p in args["prompts"]]
    return f"re:{args.get('prompt')}"


def test_namespace_persists_and_trailing_expression_is_echoed() -> None:
    repl = Repl("ctx", echo_call)
    assert repl.execute("x = len(context)")["error"] is None
    result = repl.execute("x * 2")
    assert result["output"] == "6\n"
    assert result["variables"] == {"x": "int"}


def test_final_ends_the_cell_and_cannot_be_swallowed() -> None:
    repl = Repl("ctx", echo_call)
    result = repl.execute("try:\n    FINAL('yes')\nexcept Exception:\n    pass\nprint('after')")
    assert result["final"] == {"text": "yes", "value": "yes"}
    assert "after" not in result["output"]


def test_final_var_of_an_undefined_name_is_an_error_not_the_end() -> None:
    repl = Repl("ctx", echo_call)
    result = repl.execute("FINAL_VAR('missing')")
    assert result["final"] is None
    assert "no variable named 'missing'" in result["error"]


def test_final_var_returns_structured_values_as_json() -> None:
    repl = Repl("ctx", echo_call)
    result = repl.execute("answer = {'a': [1, 2]}\nFINAL_VAR('answer')")
    assert result["final"]["value"] == {"a": [1, 2]}
    assert '"a"' in result["final"]["text"]


def test_batched_call_rejects_a_single_string() -> None:
    repl = Repl("ctx", echo_call)
    result = repl.execute("llm_query_batched('one prompt')")
    assert "expects a list of prompts, got str" in result["error"]


def test_call_failures_come_back_as_error_strings_and_a_spent_budget_raises() -> None:
    def failing(kind: str, args: dict[str, Any]) -> Any:
        prompt = args.get("prompt") or args["prompts"][0]
        raise (BudgetExhaustedError("max_sub_tokens reached") if "budget" in prompt else CallFailed("boom"))

    repl = Repl("ctx", failing)
    code = "print(repr(llm_query('x')), llm_query_batched(['x', 'y']), repr(rlm_query('x', model='m')))"
    result = repl.execute(code)
    assert result["error"] is None
    assert result["output"] == "'Error: boom' ['Error: boom', 'Error: boom'] 'Error: boom'\n"
    assert "BudgetExhaustedError" in repl.execute("llm_query('budget')")["error"]


def test_output_is_captured_per_cell_and_capped() -> None:
    repl = Repl("ctx", echo_call, capture_chars=100)
    result = repl.execute("print('y' * 1000)")
    assert len(result["output"]) == 100 and result["output_chars"] == 1001


def test_concurrent_repls_do_not_mix_output() -> None:
    outputs: dict[int, str] = {}

    def run(n: int) -> None:
        repl = Repl("ctx", echo_call)
        outputs[n] = repl.execute(f"for _ in range(200): print({n})")["output"]

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n, text in outputs.items():
        assert set(text.split()) == {str(n)}


def test_syntax_error_is_reported_with_its_line() -> None:
    result = Repl("ctx", echo_call).execute("x = (1,\n")
    assert result["error"].startswith("SyntaxError") or "SyntaxError" in result["error"]


def test_final_var_may_return_the_context_itself() -> None:
    result = Repl("the whole input", echo_call).execute("FINAL_VAR('context')")
    assert result["final"] == {"text": "the whole input", "value": "the whole input"}


def test_final_var_of_a_repl_function_name_is_refused() -> None:
    result = Repl("ctx", echo_call).execute("FINAL_VAR('llm_query')")
    assert result["final"] is None and "no variable named 'llm_query'" in result["error"]


def test_a_final_answer_is_text_first_and_cut_to_fit_one_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(finals, "MAX_FINAL_CHARS", 10)
    monkeypatch.setattr(finals, "MAX_FINAL_VALUE_CHARS", 5)
    sent: list[dict[str, Any]] = []
    repl = Repl("ctx", echo_call)
    repl.on_final = sent.append
    result = repl.execute("FINAL('y' * 50)")
    final = result["final"]
    assert final["text"] == "y" * 10 + "\n[final answer cut at 10 of 50 characters]"
    assert final["value"] is None and final["value_is_text"] is True  # not sent twice
    assert sent == [final]  # announced before the cell ended


def test_a_failing_announcement_does_not_lose_the_answer() -> None:
    def broken(final: dict[str, Any]) -> None:
        raise OSError("the pipe is gone")

    repl = Repl("ctx", echo_call)
    repl.on_final = broken
    assert repl.execute("FINAL_VAR({'a': 1})")["final"]["value"] == {"a": 1}


def test_an_exception_text_is_capped_like_output() -> None:
    repl = Repl("ctx", echo_call, capture_chars=1000)
    error = repl.execute("raise KeyError('k' * 100_000)")["error"]
    assert "KeyError" in error and len(error) < 1100 and "characters cut" in error
