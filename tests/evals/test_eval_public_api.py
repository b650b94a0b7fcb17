import rlm_adapters.evals


def test_public_names_are_pinned():
    # `add_parser` (the `rlm eval` subcommand's registration) lives with the subcommand, in rlm_adapters.cli.eval.
    assert sorted(rlm_adapters.evals.__all__) == sorted(
        [
            "ARM_NAMES",
            "TASK_NAMES",
            "ArmName",
            "ArmOutcome",
            "EvalPlan",
            "Instance",
            "ModelSetup",
            "Task",
            "TaskName",
            "make_task",
            "restore_reference",
            "run_arm",
            "run_eval",
            "write_reports",
        ]
    )
    assert rlm_adapters.evals.ARM_NAMES == (
        "direct",
        "compaction",
        "rlm",
        "routed",
        "rlm-depth0",
        "rlm-depth2",
        "rlms",
    )
    assert rlm_adapters.evals.TASK_NAMES == ("sniah", "oolong", "oolong-pairs", "codeqa")
