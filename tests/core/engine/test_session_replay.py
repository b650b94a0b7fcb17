"""A persistent session rebuilt from its recorded turns: with its call cache, the same calls, for nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rlm_adapters import RLM, ConfigurationError, Message, ScriptedModel
from rlm_adapters.core.engine.session_replay import SessionTurn

TURNS = {
    "first document": ["```repl\ntotal = len(context)\nprint(total)\n```", "FINAL(counted)"],
    "second document": ["```repl\ntotal += len(context_1)\nprint(total, llm_query('sum?'))\n```", "FINAL_VAR('total')"],
    "third document": ["```repl\nprint(total, len(history_1))\n```", "FINAL(rebuilt)"],
}


def root_model() -> ScriptedModel:
    def reply(messages: list[Message]) -> str:
        script = next(s for doc, s in TURNS.items() if doc in messages[1]["content"])
        return script[min(sum(m["role"] == "assistant" for m in messages), len(script) - 1)]

    return ScriptedModel(reply, model_name="root")


def persistent(cache: Path, environment: str = "local") -> tuple[RLM, ScriptedModel, ScriptedModel]:
    root, leaf = root_model(), ScriptedModel(lambda m: "a sum", model_name="leaf")
    rlm = RLM(backend=root, other_backends=[leaf], environment=environment, persistent=True, cache=cache)
    return rlm, root, leaf


@pytest.mark.parametrize("environment", ["local", "subprocess"])
def test_a_session_lost_with_its_process_is_rebuilt_from_its_turns_without_a_model_call(
    tmp_path: Path, environment: str
) -> None:
    cache = tmp_path / "calls.sqlite"
    rlm, _root, _leaf = persistent(cache, environment)
    with rlm:
        assert rlm.completion("first document", "count it").response == "counted"
        assert rlm.completion("second document!", "add it").response == "30"
        assert rlm.session is not None
        recorded = [turn.to_dict() for turn in rlm.session.turns]
    # What a server would keep for its session (a JSON file next to the cache), as it was before the crash.
    saved = json.loads(json.dumps(recorded))
    assert [t["prompt"] for t in saved] == ["first document", "second document!"]

    rebuilt, root, leaf = persistent(cache, environment)
    with rebuilt:
        results = rebuilt.replay_session([SessionTurn.from_dict(t) for t in saved])
        total = len("first document") + len("second document!")
        assert [r.response for r in results] == ["counted", str(total)]
        assert root.calls == leaf.calls == []  # every call of both turns came from the cache
        assert all(r.usage_summary.total.cached_calls == r.usage_summary.total.calls for r in results)
        # The REPL is as the lost session left it: a third turn reads its variables and histories.
        third = rebuilt.completion("third document", "still there?")
        assert third.response == "rebuilt" and f"{total} 5" in root.calls[-1][-1]["content"]  # 5 messages
        assert rebuilt.session is not None and len(rebuilt.session.turns) == 3


async def test_a_run_that_broke_the_sandbox_starts_the_record_again() -> None:
    slow = ScriptedModel(lambda m: "```repl\nprint(1)\n```", model_name="root", latency=0.05)
    async with RLM(backend=ScriptedModel(["FINAL(one)"]), environment="local", persistent=True) as rlm:
        await rlm.acompletion("one")
        assert rlm.session is not None and [t.prompt for t in rlm.session.turns] == ["one"]
        rlm.backend = slow
        cancel = asyncio.Event()
        result = await rlm.acompletion("two", callbacks=[lambda event: cancel.set()], cancel_event=cancel)
        # A cancelled run drops the sandbox: the state the record described is gone, and so is the record.
        assert result.finish_reason == "cancelled"
        assert rlm.session is not None and rlm.session.turns == []
        rlm.backend = ScriptedModel(["FINAL(three)"])
        await rlm.acompletion("three")
        assert [t.prompt for t in rlm.session.turns] == ["three"]


def test_replay_needs_a_new_persistent_rlm() -> None:
    turn = SessionTurn("ctx", "q")
    with pytest.raises(ConfigurationError, match="persistent=True"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local").replay_session([turn])
    with RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local", persistent=True) as rlm:
        rlm.completion("ctx", "q")
        with pytest.raises(ConfigurationError, match="has turns already"):
            rlm.replay_session([turn])


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"query": "q"}, "with a 'prompt'"),
        ({"prompt": "p", "extra": 1}, r"unknown keys \['extra'\]"),
        ({"prompt": "p", "query": 5}, "query must be a string"),
        ("not a dict", "with a 'prompt'"),
    ],
)
def test_a_bad_recorded_turn_is_refused_naming_what_is_wrong(data: object, says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        SessionTurn.from_dict(data)  # type: ignore[arg-type]
