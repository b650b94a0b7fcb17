"""`rlm eval`: the RLM paper's long-context task families, their scorers, and RLM against its baselines.

Tasks (`tasks`): S-NIAH, OOLONG trec_coarse, OOLONG-Pairs and LongBench v2 CodeQA, each built, prompted and
scored as its original (`scorers`). Arms (`arms`): ``direct`` and ``compaction`` (the paper's base model and
summary agent), ``rlm``, ``rlm-depth0`` and ``rlm-depth2`` (this engine at depth 1, 0 and 2), and ``rlms`` (the
reference RLM, PyPI ``rlms``, driving the same model clients). `runner` runs every (arm, instance) pair
resumably, `report` summarises, `table1` sets a run beside the paper's Table 1 (``rlm eval reproduce
--table1``), ``rlm eval`` is `rlm_adapters.cli.eval`. Needs the ``eval`` extra (tiktoken, matplotlib,
llama-index-core, numpy, python-dateutil, wonderwords); the ``rlms`` arm needs the ``bench`` extra.
"""

from __future__ import annotations

from rlm_adapters.evals.arms import ARM_NAMES, ArmName, ArmOutcome, ModelSetup, restore_reference, run_arm
from rlm_adapters.evals.report import write_reports
from rlm_adapters.evals.runner import EvalPlan, run_eval
from rlm_adapters.evals.tasks import TASK_NAMES, Instance, Task, TaskName, make_task

__all__ = [
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
