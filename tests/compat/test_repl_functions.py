"""Port of the reference's REPL-function tests (tests/test_rlm_query.py, tests/test_subcall.py's model
override cases): `llm_query`, `llm_query_batched`, `rlm_query` with `model=`, and one failure rule."""

from __future__ import annotations

import ast
import asyncio

import pytest

from rlm_adapters import RLM, Message, ModelError, ScriptedModel
from rlm_adapters.core.lm.scripted import Reply

from .helpers import by_turn, make


def failing_leaf(messages: list[Message]) -> Reply:
    if "bad" in messages[-1]["content"]:
        raise ModelError("HTTP 500 from provider", model="leaf")
    return "fine"


def leaf() -> ScriptedModel:
    return ScriptedModel(failing_leaf, model_name="leaf")


@pytest.mark.parametrize("environment", ["local", "subprocess"])
def test_one_failure_rule_for_all_three(environment: str) -> None:
    code = (
        "```repl\n"
        "a = llm_query('bad one')\n"
        "b = llm_query_batched(['ok', 'bad', 'ok'])\n"
        "c = rlm_query('bad child', context='x')\n"
        "d = llm_query('hi', model='no-such-model')\n"
        "FINAL(repr([a, b, c, d]))\n```"
    )
    result = RLM(backend=by_turn(code), other_backends=[leaf()], environment=environment).completion("c")
    a, b, c, d = ast.literal_eval(result.response)
    assert a == "Error: HTTP 500 from provider"
    assert b == ["fine", "Error: HTTP 500 from provider", "fine"]
    assert c == "Error: HTTP 500 from provider"  # at max_depth=1 rlm_query is a plain call
    assert d.startswith("Error: unknown model 'no-such-model'")


def test_the_rule_is_told_to_the_model() -> None:
    root = by_turn("FINAL(x)")
    make(root).completion("c")
    assert 'returns a string starting with "Error: "' in root.calls[0][0]["content"]


def test_a_failed_nested_rlm_is_an_error_string_not_a_silent_empty_answer() -> None:
    def model(messages: list[Message]) -> Reply:
        if "Child task" in messages[1]["content"]:
            raise ModelError("child model down", model="m")
        return "```repl\nFINAL(repr(rlm_query('Child task', context='data')))\n```"

    result = RLM(backend=ScriptedModel(model, model_name="m"), max_depth=2, environment="local").completion("c")
    assert result.response.startswith("'Error: the nested RLM ended with error")
    assert "child model down" in result.response


def test_nested_rlm_uses_the_root_model_unless_told_otherwise() -> None:
    seen: list[str] = []

    def model_named(name: str) -> ScriptedModel:
        def reply(messages: list[Message]) -> Reply:
            if "Child task" in messages[1]["content"]:
                seen.append(name)
                return "```repl\nFINAL('child of ' + str(len(context)))\n```"
            both = "rlm_query('Child task', context='abc') + ' / ' + rlm_query('Child task', 'other')"
            return f"```repl\nFINAL({both})\n```"

        return ScriptedModel(reply, model_name=name)

    rlm = RLM(backend=model_named("root"), other_backends=[model_named("other")], max_depth=2, environment="local")
    result = rlm.completion("c")
    # The second call is the reference's rlm_query(prompt, model): a known model name is the model.
    assert result.response == "child of 3 / child of 10"
    assert seen == ["root", "other"]


def test_model_keyword_reaches_every_function() -> None:
    other = ScriptedModel(lambda m: "from other", model_name="other")
    code = (
        "```repl\nFINAL(repr([llm_query('q', model='other'), llm_query_batched(['q'], model='other'), "
        "rlm_query('q', model='other')]))\n```"
    )
    result = RLM(backend=by_turn(code), other_backends=[leaf(), other], environment="local").completion("c")
    assert result.response == "['from other', ['from other'], 'from other']"


def test_batched_empty_and_order() -> None:
    slow_first = ScriptedModel(
        lambda m: m[-1]["content"].upper(),
        model_name="leaf",
        latency=0.01,
    )
    calls = "llm_query_batched([]), rlm_query_batched([]), llm_query_batched(['a', 'b', 'c'])"
    code = f"```repl\nFINAL(repr([{calls}]))\n```"
    result = RLM(backend=by_turn(code), other_backends=[slow_first], environment="local").completion("c")
    assert result.response == "[[], [], ['A', 'B', 'C']]"


def test_max_concurrent_subcalls_bounds_nested_runs() -> None:
    running = 0
    peak = 0

    async def model(messages: list[Message]) -> Reply:
        nonlocal running, peak
        if "Child" in messages[1]["content"]:
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1
            return "```repl\nFINAL('ok')\n```"
        return "```repl\nFINAL(repr(rlm_query_batched([f'Child {i}' for i in range(6)], ['x'] * 6)))\n```"

    rlm = RLM(backend=ScriptedModel(model, model_name="m"), max_depth=2, environment="local", max_concurrent_subcalls=2)
    assert rlm.completion("c").response == repr(["ok"] * 6)
    assert peak == 2
