"""The ``rlms`` arm: the reference RLM (PyPI ``rlms``) with the same clients and budget as the ``rlm`` arm."""

import asyncio
import os
import sys

import pytest

from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.evals.arms import ModelSetup, parse_arms, reference, run_arm
from rlm_adapters.evals.tasks.base import Instance
from rlm_adapters.evals.tasks.sniah import SniahTask
from rlm_adapters.testing import turn_of

needs_rlms = pytest.mark.skipif(not reference.available(), reason="the reference RLM (package rlms) is not installed")

# The needle is found by code and checked by the sub-model; the answer is submitted either way the engine
# understands (the reference knows only the answer dict; ours takes both).
FIND = (
    "```repl\nimport re\nfound = re.findall(r'\\d{5,}', context)\n"
    "checked = llm_query('confirm ' + found[0])\nprint(found, checked)\n```"
)
SUBMIT = "```repl\nanswer['content'] = found[0]\nanswer['ready'] = True\n```"


def root_policy(messages):
    if messages[-1]["role"] == "user" and messages[-1]["content"].startswith("confirm"):
        return "yes"
    turn = turn_of(messages)
    return FIND if turn == 0 else SUBMIT


@pytest.fixture
def instance() -> Instance:
    return SniahTask().generate(2048, 1, seed=0)[0]


@needs_rlms
async def test_both_engines_answer_the_same_instance_with_the_same_clients(instance):
    root = ScriptedModel(root_policy, model_name="root-m")
    sub = ScriptedModel(lambda m: "yes", model_name="sub-m")
    setup = ModelSetup(root=root, sub=sub, environment="local", rlm_kwargs={"max_iterations": 5})
    ours = await run_arm("rlm", setup, instance)
    theirs = await run_arm("rlms", setup, instance)
    assert ours.status == theirs.status == "ok"
    assert instance.gold[0] in ours.answer and instance.gold[0] in theirs.answer
    assert theirs.extra["engine"] == "rlms"
    # Every call of the reference went through our clients: 2 root turns and 1 sub-call each.
    assert (ours.calls, theirs.calls) == (3, 3)
    assert len(sub.calls) == 2 and theirs.input_tokens > 0
    # The reference's own system prompt reached the shared root model.
    reference_prompts = [c[0]["content"] for c in root.calls if "Recursive Language Model" in c[0]["content"]]
    assert reference_prompts


@needs_rlms
async def test_the_reference_budget_is_the_same_and_its_errors_become_statuses(instance):
    root = ScriptedModel(lambda m: "```repl\nprint('still looking')\n```", model_name="root-m")
    setup = ModelSetup(root=root, environment="local", rlm_kwargs={"max_iterations": 2})
    outcome = await run_arm("rlms", setup, instance)
    # Out of iterations, the reference asks once more for an answer (3 calls) and returns it.
    assert outcome.status == "ok" and outcome.calls == 3


@needs_rlms
def test_the_arm_is_listed_and_parsed():
    assert parse_arms("rlm,rlms") == ["rlm", "rlms"]


def test_without_the_reference_the_arm_names_the_package(monkeypatch):
    monkeypatch.setattr(reference, "available", lambda: False)
    with pytest.raises(ValueError, match=r"pip install rlms"):
        parse_arms("rlm,rlms")


def reference_get_client():
    import rlm.core.rlm

    return rlm.core.rlm.get_client


@needs_rlms
async def test_the_reference_is_patched_only_while_runs_are_in_flight_and_they_go_one_at_a_time(instance):
    original, folder, stdout = reference_get_client(), os.getcwd(), sys.stdout
    during = []

    def policy(messages):
        during.append(reference_get_client() is original)
        return root_policy(messages)

    setup = ModelSetup(root=ScriptedModel(policy, model_name="root-m"), environment="local")
    outcomes = await asyncio.gather(*(run_arm("rlms", setup, instance) for _ in range(4)))
    assert [o.status for o in outcomes] == ["ok"] * 4 and during and not any(during)
    assert reference_get_client() is original and reference._registry == {}
    # The reference's REPL changes folder and stdout per cell: four at once left the process in a deleted folder.
    assert os.getcwd() == folder and sys.stdout is stdout
    assert all(o.seconds > 0 for o in outcomes)


@needs_rlms
async def test_cancelled_runs_restore_the_reference_and_a_waiting_one_starts_nothing(instance):
    original = reference_get_client()
    called, release = asyncio.Event(), asyncio.Event()

    async def gate(messages):
        called.set()
        await release.wait()
        return SUBMIT.replace("found[0]", "'late'")

    first = asyncio.create_task(run_arm("rlms", ModelSetup(root=ScriptedModel(gate), environment="local"), instance))
    waiting = ScriptedModel(root_policy)
    second = asyncio.create_task(run_arm("rlms", ModelSetup(root=waiting, environment="local"), instance))
    gated = asyncio.create_task(called.wait())
    await asyncio.wait([gated, first], return_when=asyncio.FIRST_COMPLETED)
    assert gated.done(), first.result()
    assert reference_get_client() is not original
    for task in (second, first):
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert reference_get_client() is original
    # The first reference thread still waits for its model call: answer it, and let both threads end.
    release.set()
    await asyncio.get_running_loop().shutdown_default_executor()
    assert reference_get_client() is original and waiting.calls == []


@needs_rlms
def test_restore_reference_undoes_a_leftover_patch():
    original = reference_get_client()
    leftover = reference._route.active()
    leftover.__enter__()  # a run that never ended (its process was interrupted, say)
    reference._registry["rlm-adapters-0:m"] = object()
    assert reference_get_client() is not original
    reference.restore_reference()
    assert reference_get_client() is original and reference._registry == {}
    reference.restore_reference()  # idempotent
    assert reference_get_client() is original
    leftover.__exit__(None, None, None)  # the interrupted run ending late counts nothing below zero
    assert reference_get_client() is original and reference._route.runs == 0
    with reference._route.active():
        assert reference_get_client() is not original  # so the next run still routes its clients
    assert reference_get_client() is original
