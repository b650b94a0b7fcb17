"""The ``rlms`` arm: the reference RLM (PyPI ``rlms``) with the same clients and budget as the ``rlm`` arm."""

import pytest

from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.evals.arms import ModelSetup, parse_arms, reference, run_arm
from rlm_adapters.evals.tasks.base import Instance
from rlm_adapters.evals.tasks.sniah import SniahTask

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
    turn = sum(m["role"] == "assistant" for m in messages)
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
