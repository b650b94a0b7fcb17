"""The task families of `rlm eval`."""

from __future__ import annotations

from pathlib import Path

from rlm_adapters.evals.tasks.base import TASK_NAMES, Instance, Task, TaskName
from rlm_adapters.evals.tasks.codeqa import CodeQATask
from rlm_adapters.evals.tasks.oolong import OolongTask
from rlm_adapters.evals.tasks.oolong_pairs import OolongPairsTask
from rlm_adapters.evals.tasks.sniah import SniahTask


def make_task(name: TaskName, data_dir: Path | None = None) -> Task:
    """The task called `name` (`data_dir` is used by CodeQA only)."""
    if name == "sniah":
        return SniahTask()
    if name == "oolong":
        return OolongTask()
    if name == "oolong-pairs":
        return OolongPairsTask()
    return CodeQATask(data_dir)


__all__ = [
    "TASK_NAMES",
    "CodeQATask",
    "Instance",
    "OolongPairsTask",
    "OolongTask",
    "SniahTask",
    "Task",
    "TaskName",
    "make_task",
]
