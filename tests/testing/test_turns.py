"""`by_turn`: a scripted root model whose reply depends only on the conversation's turn."""

from __future__ import annotations

import asyncio

import pytest

from rlm_adapters import RLM, Message
from rlm_adapters.testing import by_turn


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    for turn in range(turns):
        messages += [{"role": "assistant", "content": f"reply {turn}"}, {"role": "user", "content": "output"}]
    return messages


async def test_each_turn_gets_its_reply_and_the_last_repeats() -> None:
    model = by_turn("first", "second", model_name="root")
    replies = [(await model.acomplete(conversation(turns))).text for turns in (0, 1, 2, 7, 0)]
    assert replies == ["first", "second", "second", "second", "first"]  # by the conversation, not call order
    assert model.model_name == "root" and len(model.calls) == 5


async def test_one_model_is_the_root_of_several_runs_at_once() -> None:
    """Each run gets the whole script, however the runs' calls interleave (a list in call order would not)."""
    root = by_turn("```repl\nx = len(context)\n```", "```repl\nFINAL(str(x))\n```")
    rlm = RLM(backend=root, environment="local")
    results = await asyncio.gather(*(rlm.acompletion("a" * n, "how long?") for n in (3, 6, 9)))
    assert [(r.finish_reason, r.response) for r in results] == [("final", "3"), ("final", "6"), ("final", "9")]
    assert len(root.calls) == 6


async def test_latency_is_passed_on() -> None:
    model = by_turn("x", latency=0.2)
    started = asyncio.get_running_loop().time()
    await model.acomplete(conversation(0))
    assert asyncio.get_running_loop().time() - started >= 0.2


def test_no_reply_is_refused_with_a_hint() -> None:
    with pytest.raises(ValueError, match=r"by_turn needs at least one reply, e\.g\. by_turn\('FINAL\(done\)'\)"):
        by_turn()
