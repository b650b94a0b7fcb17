"""Port of the reference's multi-turn tests (tests/test_multi_turn_integration.py,
tests/test_local_repl_persistent.py) against `RLM(persistent=True)`, in every local sandbox kind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rlm_adapters import RLM, ConfigurationError, Message, ScriptedModel
from rlm_adapters.core.lm.scripted import Reply
from rlm_adapters.testing import turn_of

from .helpers import by_turn, final, make, user_text

KINDS = ["local", "subprocess"]


class Script:
    """A root model whose replies are swapped between completions, like the reference's Mock side_effect."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.model = ScriptedModel(self._reply, model_name="test")

    def play(self, *replies: str) -> None:
        self.replies = list(replies)

    def _reply(self, messages: list[Message]) -> Reply:
        turn = turn_of(messages)
        return self.replies[min(turn, len(self.replies) - 1)]


@pytest.mark.parametrize("environment", KINDS)
def test_environment_and_variables_persist_across_calls(environment: str) -> None:
    script = Script("```repl\ncomputed_value = 42 * 2\nprint(computed_value)\n```", final("84"))
    with make(script.model, environment=environment, persistent=True) as rlm:
        assert rlm.completion("Compute 42 * 2").response == "84"
        sandbox = rlm.session.sandbox if rlm.session else None
        script.play("```repl\nresult = computed_value + 10\nprint(result)\n```", "```repl\nFINAL_VAR('result')\n```")
        assert rlm.completion("Add 10 to the previous result").response == "94"
        assert rlm.session is not None and rlm.session.sandbox is sandbox is not None
    assert rlm.session is None


@pytest.mark.parametrize("environment", KINDS)
def test_contexts_and_histories_accumulate(environment: str) -> None:
    script = Script(final("got it"))
    with make(script.model, environment=environment, persistent=True) as rlm:
        rlm.completion("First document")
        rlm.completion("Second document")
        script.play(
            "```repl\nprint(repr((context_0, context_1, context_2, context)))\n"
            "print(len(history_0), len(history_1), history == history_1, history_0[0]['role'])\n```",
            final("checked"),
        )
        result = rlm.completion("Third document")
    shown = script.model.calls[-1][-1]["content"]
    assert "('First document', 'Second document', 'Third document', 'Third document')" in shown
    assert "True system" in shown
    assert result.metadata["session"] == {"contexts": 3, "histories": 3}


def test_the_root_is_told_how_many_contexts_and_histories_there_are() -> None:
    script = Script(final("ok"))
    with make(script.model, persistent=True) as rlm:
        rlm.completion("First")
        rlm.completion("Second")
    text = user_text(script.model.calls[-1])
    assert "2 contexts" in text and "context_0 through context_1" in text
    assert "history_0 through history_0" in text


def test_context_alias_first_is_the_references() -> None:
    script = Script(final("ok"))
    with make(script.model, persistent=True, context_alias="first") as rlm:
        rlm.completion("First")
        script.play("```repl\nprint(context)\ncontext = 'x'\n```", "```repl\nprint(context)\n```", final("ok"))
        rlm.completion("Second")
    assert script.model.calls[-2][-1]["content"].count("First") == 1
    assert "First" in script.model.calls[-1][-1]["content"]


def test_non_persistent_mode_starts_fresh_each_call() -> None:
    script = Script("```repl\nx = 1\n```", final("set"))
    rlm = make(script.model)
    rlm.completion("First")
    script.play("```repl\nprint('x' in globals())\n```", final("checked"))
    rlm.completion("Second")
    assert "False" in script.model.calls[-1][-1]["content"]
    assert rlm.persistent is False and rlm.session is None


def test_explicit_close_then_a_new_call_starts_a_fresh_session() -> None:
    script = Script("```repl\nx = 1\n```", final("set"))
    rlm = make(script.model, persistent=True)
    rlm.completion("Test")
    first = rlm.session
    rlm.close()
    rlm.close()  # twice is fine
    assert rlm.session is None and first is not None and first.closed
    script.play("```repl\nprint('x' in globals())\n```", final("checked"))
    rlm.completion("Again")
    assert "False" in script.model.calls[-1][-1]["content"]
    rlm.close()


def test_async_with_and_acompletion_share_the_session() -> None:
    async def main() -> tuple[str, str]:
        script = Script("```repl\nseen = context\n```", final("one"))
        async with make(script.model, persistent=True) as rlm:
            first = await rlm.acompletion("A")
            script.play("```repl\nFINAL(seen + '+' + context)\n```")
            second = await rlm.acompletion("B")
        return first.response, second.response

    assert asyncio.run(main()) == ("one", "A+B")


def test_idle_limit_closes_the_sandbox_and_the_next_call_starts_fresh() -> None:
    script = Script("```repl\nx = 1\n```", final("set"))
    with make(script.model, persistent=True, session_idle_timeout=0.05) as rlm:
        rlm.completion("First")
        deadline = time.monotonic() + 5
        while rlm.session is not None and rlm.session.sandbox is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rlm.session is not None and rlm.session.sandbox is None
        script.play("```repl\nprint('x' in globals())\n```", final("checked"))
        result = rlm.completion("Second")
    assert "False" in script.model.calls[-1][-1]["content"]
    assert result.metadata["session"]["restarted"] == "the session reached its idle_timeout"
    assert result.metadata["session"]["contexts"] == 1


def test_total_lifetime_limit_waits_for_the_run_in_progress() -> None:
    async def slow(messages: list[Message]) -> Reply:
        await asyncio.sleep(0.15)
        return final("slow")

    with make(ScriptedModel(slow, model_name="m"), persistent=True, session_max_lifetime=0.05) as rlm:
        assert rlm.completion("First").response == "slow"  # the limit passed mid-run; the run finished
        result = rlm.completion("Second")
    assert result.metadata["session"]["restarted"] == "the session reached its max_lifetime"


def test_bad_session_options_are_clear_errors() -> None:
    with pytest.raises(ConfigurationError, match="session_idle_timeout=0 must be a positive number"):
        RLM(backend=by_turn("x"), persistent=True, session_idle_timeout=0)
    with pytest.raises(ConfigurationError, match="context_alias='last' must be 'latest' or 'first'"):
        RLM(backend=by_turn("x"), persistent=True, context_alias="last")  # type: ignore[arg-type]


def _session_round_trip(environment: str, options: dict[str, object]) -> None:
    script = Script("```repl\nkept = context.upper()\n```", final("one"))
    with make(script.model, environment=environment, environment_kwargs=options, persistent=True) as rlm:
        rlm.completion("first")
        script.play("```repl\nFINAL(kept + '/' + context + '/' + str(len(history_0)))\n```")
        result = rlm.completion("second")
    assert result.response.startswith("FIRST/second/") and result.metadata["sandbox"] == environment


def test_persistent_session_in_e2b(tmp_path: Path) -> None:
    from tests.core.sandbox.cloud.fakes import FakeE2B, Service

    service = Service(tmp_path / "provider")
    fake = FakeE2B(service)
    _session_round_trip("e2b", {"sandbox_factory": fake.create})
    assert len(fake.sandboxes) == 1 and service.live() == []  # one cloud sandbox for the session, closed at the end


def test_persistent_session_in_docker() -> None:
    from tests.core.sandbox.test_docker import LOCAL_IMAGE, PROBLEM

    if PROBLEM is not None:
        pytest.skip(f"no usable Docker engine (package docker / a running engine): {PROBLEM}")
    _session_round_trip("docker", dict(LOCAL_IMAGE))


def test_a_dropped_persistent_rlm_closes_its_sandbox() -> None:
    import gc

    script = Script("```repl\nx = 1\n```", final("set"))
    rlm = make(script.model, environment="subprocess", persistent=True)
    rlm.completion("First")
    session = rlm.session
    assert session is not None and session.sandbox is not None
    del rlm
    gc.collect()
    assert session.closed and session.sandbox is None and session.runner.loop.is_closed()


def test_a_worker_restart_mid_session_keeps_context_the_current_one() -> None:
    script = Script("```repl\nx = 1\n```", final("set"))
    options = {"cell_timeout": 1.0}
    with make(script.model, environment="subprocess", environment_kwargs=options, persistent=True) as rlm:
        rlm.completion("first context")
        script.play(
            # Swallows the interrupt a cell past cell_timeout gets, so its worker is killed and restarted.
            "```repl\nimport time\nwhile True:\n    try:\n        time.sleep(30)\n"
            "    except BaseException:\n        pass\n```",
            "```repl\nprint(repr(context), 'x' in globals())\n```",
            final("after"),
        )
        result = rlm.completion("second context")
        assert result.response == "after"
        shown = script.model.calls[-1][-1]["content"]
        assert "'second context' False" in shown
        script.play("```repl\nprint(repr(context), context_0)\n```", final("third"))
        result = rlm.completion("third context")
    assert "'third context' first context" in script.model.calls[-1][-1]["content"]
    assert result.metadata["session"] == {"contexts": 3, "histories": 2}  # the two runs since the restart
