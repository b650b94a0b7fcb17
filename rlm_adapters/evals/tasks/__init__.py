"""The task families of `rlm eval`."""

from __future__ import annotations

from pathlib import Path

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.protocol import ProtocolName, ScoringName
from rlm_adapters.evals.tasks.base import TASK_NAMES, Instance, Task, TaskName
from rlm_adapters.evals.tasks.codeqa import CodeQATask
from rlm_adapters.evals.tasks.oolong import OolongTask
from rlm_adapters.evals.tasks.oolong_legacy import LegacyOolongTask
from rlm_adapters.evals.tasks.oolong_pairs import OolongPairsTask
from rlm_adapters.evals.tasks.oolong_pairs_legacy import LegacyOolongPairsTask
from rlm_adapters.evals.tasks.sniah import SniahTask
from rlm_adapters.evals.tasks.sniah_legacy import LegacySniahTask


def make_task(
    name: TaskName,
    data_dir: Path | None = None,
    *,
    protocol: ProtocolName = "paper",
    scoring: ScoringName = "paper",
    truncate: bool = False,
) -> Task:
    """The task called `name`.

    Args:
        name: The task family.
        data_dir: CodeQA's items, or (OOLONG, paper protocol) exported oolong-synth rows.
        protocol: ``paper`` (the originals' generators and prompts) or ``legacy``.
        scoring: ``paper`` (the originals' scorers) or ``lenient``.
        truncate: CodeQA only: middle-truncate ``direct`` prompts to the length, as LongBench does.

    Raises:
        ConfigurationError: for a `data_dir` the task cannot use.
    """
    if data_dir is not None and (name in ("sniah", "oolong-pairs") or (name == "oolong" and protocol != "paper")):
        raise ConfigurationError(f"--data-dir is not used by {name!r} with --protocol {protocol}; leave it out")
    if name == "sniah":
        return SniahTask(scoring) if protocol == "paper" else LegacySniahTask(scoring=scoring)
    if name == "oolong":
        return OolongTask(scoring, data_dir) if protocol == "paper" else LegacyOolongTask(scoring)
    if name == "oolong-pairs":
        return OolongPairsTask(scoring) if protocol == "paper" else LegacyOolongPairsTask(scoring)
    return CodeQATask(data_dir, protocol=protocol, scoring=scoring, truncate=truncate)


__all__ = [
    "TASK_NAMES",
    "CodeQATask",
    "Instance",
    "LegacyOolongPairsTask",
    "LegacyOolongTask",
    "LegacySniahTask",
    "OolongPairsTask",
    "OolongTask",
    "SniahTask",
    "Task",
    "TaskName",
    "make_task",
]
