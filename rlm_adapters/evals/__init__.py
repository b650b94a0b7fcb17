"""`rlm eval`: the RLM paper's long-context task families, their scorers, and RLM against its baselines.

Tasks: S-NIAH, OOLONG trec_coarse, OOLONG-Pairs, LongBench v2 CodeQA, each built, prompted and scored as
its original (`rlm_adapters.evals.tasks`, `rlm_adapters.evals.scorers`). Arms: ``direct``,
``compaction``, ``rlm``, ``rlm-depth0``, ``rlm-depth2``. ``rlm eval reproduce --table1`` sets a run beside the
paper's Table 1. Needs the ``eval`` extra (tiktoken, matplotlib, llama-index-core, numpy, python-dateutil,
wonderwords).
"""

from __future__ import annotations

from rlm_adapters.evals.arms import ARM_NAMES, ArmName, ArmOutcome, ModelSetup, run_arm
from rlm_adapters.evals.command import add_parser
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
    "add_parser",
    "make_task",
    "run_arm",
    "run_eval",
    "write_reports",
]
