"""The task families of `rlm eval`, each built, prompted and scored as its original benchmark does."""

from __future__ import annotations

from pathlib import Path

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks.base import TASK_NAMES, Instance, Task, TaskName
from rlm_adapters.evals.tasks.codeqa import CodeQATask
from rlm_adapters.evals.tasks.oolong import OolongTask
from rlm_adapters.evals.tasks.oolong_pairs import OolongPairsTask
from rlm_adapters.evals.tasks.sniah import SniahTask


def make_task(name: TaskName, data_dir: Path | None = None, *, truncate: bool = False) -> Task:
    """The task called `name`.

    Args:
        name: The task family.
        data_dir: CodeQA's items, or (OOLONG) exported oolong-synth rows.
        truncate: CodeQA only: middle-truncate ``direct`` prompts to the length, as LongBench does.

    Raises:
        ConfigurationError: for a `data_dir` the task cannot use.
    """
    if data_dir is not None and name in ("sniah", "oolong-pairs"):
        raise ConfigurationError(f"--data-dir is not used by {name!r}; leave it out")
    if name == "sniah":
        return SniahTask()
    if name == "oolong":
        return OolongTask(data_dir)
    if name == "oolong-pairs":
        return OolongPairsTask()
    return CodeQATask(data_dir, truncate=truncate)


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
