import json

import pytest

from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.errors import ModelError
from rlm_adapters.evals import runner
from rlm_adapters.evals.arms import ModelSetup
from rlm_adapters.evals.runner import (
    RESULTS_FILE,
    EvalPlan,
    generate_all,
    load_records,
    record_key,
    run_eval,
    run_settings,
)
from rlm_adapters.evals.tasks.base import Instance
from rlm_adapters.evals.tasks.sniah import SniahTask


class Stop(Exception):
    pass


def plan_for(tmp_path, arms=("direct",), n=3):
    return EvalPlan(lengths=[2048, 4096], n=n, arms=list(arms), seed=0, out=tmp_path, concurrency=1)


async def test_records_are_written_per_pair_with_scores(tmp_path, sniah_root):
    plan = plan_for(tmp_path, arms=("direct", "rlm"))
    setup = ModelSetup(root=ScriptedModel(sniah_root, model_name="m"), environment="local")
    records = await run_eval(SniahTask(), setup, plan)
    assert len(records) == 2 * 3 * 2
    assert all(r["score"] == 1.0 and r["status"] == "ok" for r in records)
    assert load_records(tmp_path / RESULTS_FILE) == records
    # Both arms ran on the very same instances.
    by_arm = {arm: {r["key"].split("|", 1)[1] for r in records if r["arm"] == arm} for arm in plan.arms}
    assert by_arm["direct"] == by_arm["rlm"]


async def test_resume_after_interruption_runs_only_the_missing_pairs(tmp_path, sniah_root):
    plan = plan_for(tmp_path)
    root = ScriptedModel(sniah_root, model_name="m")
    seen = []

    def interrupt(record):
        seen.append(record)
        if len(seen) == 2:
            raise Stop

    with pytest.raises(Stop):
        await run_eval(SniahTask(), ModelSetup(root=root), plan, on_record=interrupt)
    assert len(load_records(tmp_path / RESULTS_FILE)) == 2
    with (tmp_path / RESULTS_FILE).open("a") as sink:
        sink.write('{"key": "torn')  # a write cut short by the interruption
    resumed_root = ScriptedModel(sniah_root, model_name="m")
    starts = []
    records = await run_eval(
        SniahTask(),
        ModelSetup(root=resumed_root),
        plan,
        on_start=lambda done, total: starts.append((done, total)),
    )
    assert starts == [(2, 6)]
    assert len(resumed_root.calls) == 4
    assert len(records) == 6 and len({r["key"] for r in records}) == 6
    again = ScriptedModel(sniah_root, model_name="m")
    assert len(await run_eval(SniahTask(), ModelSetup(root=again), plan)) == 6
    assert again.calls == []


async def test_another_model_or_seed_is_not_served_from_the_old_results(tmp_path, sniah_root):
    plan = plan_for(tmp_path, n=1)
    await run_eval(SniahTask(), ModelSetup(root=ScriptedModel(sniah_root, model_name="a")), plan)
    other = ScriptedModel(sniah_root, model_name="b")
    records = await run_eval(SniahTask(), ModelSetup(root=other), plan)
    assert len(other.calls) == 2 and {r["model"] for r in records} == {"b"}
    plan.seed = 1
    assert {r["seed"] for r in await run_eval(SniahTask(), ModelSetup(root=other), plan)} == {1}


async def test_context_limit_scores_zero_and_is_marked(tmp_path):
    def too_long(_messages):
        raise ModelError("maximum context length exceeded", model="m", status_code=400)

    records = await run_eval(SniahTask(), ModelSetup(root=ScriptedModel(too_long)), plan_for(tmp_path, n=1))
    assert [r["status"] for r in records] == ["context_limit", "context_limit"]
    assert [r["score"] for r in records] == [0.0, 0.0]


def test_record_key_changes_with_the_instance_content():
    plan = plan_for(None, n=1)
    first = generate_all(SniahTask(), plan)[0]
    other = SniahTask().generate(2048, 1, seed=99)[0]
    assert record_key("direct", first, {"model": "m"}) != record_key("direct", other, {"model": "m"})
    assert json.dumps(first.gold) == json.dumps(SniahTask().generate(2048, 1, seed=0)[0].gold)


@pytest.mark.parametrize(
    "change",
    [
        {"sub": ScriptedModel(["unused"], model_name="other-sub")},
        {"context_window": 64_000},
        {"compactor": ScriptedModel(["unused"], model_name="nano")},
        {"rlm_kwargs": {"max_iterations": 3}},
        {"environment": "subprocess"},
    ],
)
async def test_a_changed_setting_is_a_new_record_not_a_stale_one(tmp_path, sniah_root, change):
    # The bug of issue 19: a rerun with another --sub-model reused the record naming the old one.
    plan = plan_for(tmp_path, n=1)
    base = {"root": ScriptedModel(sniah_root, model_name="m"), "sub": ScriptedModel(["unused"], model_name="sub-a")}
    first = await run_eval(SniahTask(), ModelSetup(**base, environment="local"), plan)
    root = ScriptedModel(sniah_root, model_name="m")
    setup = ModelSetup(**{**base, "root": root, "environment": "local", **change})
    second = await run_eval(SniahTask(), setup, plan)
    assert len(root.calls) == 2  # both instances ran again
    assert {r["key"] for r in first}.isdisjoint(r["key"] for r in second)
    assert second[0]["settings"] == run_settings(setup)
    assert len(load_records(tmp_path / RESULTS_FILE)) == 4


async def test_the_harness_version_is_in_the_key(tmp_path, sniah_root, monkeypatch):
    plan = plan_for(tmp_path, n=1)
    root = ScriptedModel(sniah_root, model_name="m")
    keys = {r["key"] for r in await run_eval(SniahTask(), ModelSetup(root=root), plan)}
    monkeypatch.setattr(runner, "HARNESS_VERSION", "999")
    newer = {r["key"] for r in await run_eval(SniahTask(), ModelSetup(root=root), plan)}
    assert len(keys | newer) == 2 * 2 and len(root.calls) == 2 * 2


def test_keys_of_results_recorded_before_the_legacy_protocol_was_removed_still_match():
    # Computed by the harness that still had --protocol and --scoring, for a paper/paper run of these settings.
    instance = Instance(
        id="sniah-2048-s0-000", task="sniah", length=2048, context="ctx", question="q?", gold=["1234567"]
    )
    setup = ModelSetup(
        root=ScriptedModel(["x"], model_name="m"),
        sub=ScriptedModel(["x"], model_name="s"),
        environment="local",
        context_window=8192,
        rlm_kwargs={"max_iterations": 3},
    )
    assert (
        record_key("rlm", instance, run_settings(setup)) == "rlm|sniah-2048-s0-000|b35b6cdaebe499a2|m|3790771cf5efa376"
    )
