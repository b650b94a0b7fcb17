"""OOLONG trec_coarse: oolong-synth's windows and questions, and its scorer.

Windows come from `oolong_window` (sizing, labels, users, dates, intro and trailer as oolong-synth) and
questions from `oolong_questions` (the first 25 of each window, as the published split keeps them), so 50
instances at 131K are two windows, the shape of the split the RLM paper used. With ``data_dir`` the rows
of an exported oolong-synth split are used instead, unchanged. The ``direct`` arm sends the window as
oolong's evaluation does: after "You are a helpful assistant." in the system message, the question as the
user message.
"""

from __future__ import annotations

import random
from pathlib import Path

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.scorers import oolong_synth_score
from rlm_adapters.evals.tasks.base import Instance, TaskName, instance_id
from rlm_adapters.evals.tasks.oolong_questions import PER_WINDOW, window_questions
from rlm_adapters.evals.tasks.oolong_rows import load_rows
from rlm_adapters.evals.tasks.oolong_window import build_window


class OolongTask:
    """OOLONG trec_coarse as oolong-synth builds and scores it.

    Args:
        data_dir: A folder or file of exported oolong-synth rows; when given, its trec_coarse rows of each
            requested length are used instead of generated windows.
    """

    name: TaskName = "oolong"

    def __init__(self, data_dir: Path | None = None) -> None:
        self.rows = load_rows(data_dir) if data_dir is not None else None

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` questions at `length`: 25 per generated window, or the first `n` exported rows."""
        if self.rows is not None:
            return self._from_rows(length, n)
        instances: list[Instance] = []
        for number in range(-(-n // PER_WINDOW)):
            rng = random.Random(f"oolong-paper-{seed}-{length}-{number}")
            window = build_window(rng, length)
            context = window.text()
            for question in window_questions(window.rows, window.counts, rng):
                if len(instances) == n:
                    break
                instances.append(
                    Instance(
                        id=instance_id(self.name, length, seed, len(instances)),
                        task=self.name,
                        length=length,
                        context=context,
                        question=question.question,
                        gold=question.answer,
                        kind=f"{question.task_group}:{question.task.removeprefix('TASK_TYPE.')}",
                        metadata={
                            "answer_type": question.answer_type,
                            "window": number,
                            "lines": len(window.rows),
                            "temperature": window.temperature,
                            "input_subset": question.input_subset,
                        },
                        layout="system",
                    )
                )
        return instances

    def _from_rows(self, length: int, n: int) -> list[Instance]:
        rows = [row for row in self.rows or [] if int(row["context_len"]) == length]
        if not rows:
            lengths = sorted({int(row["context_len"]) for row in self.rows or []})
            raise ConfigurationError(
                f"no exported oolong-synth trec_coarse rows at length {length}; the rows have lengths {lengths}"
            )
        return [
            Instance(
                id=f"oolong-{length}-row{row.get('id', index)}",
                task=self.name,
                length=length,
                context=str(row["context_window_text"]),
                question=str(row["question"]),
                gold=str(row["answer"]),
                kind=f"{row.get('task_group', '')}:{str(row.get('task', '')).removeprefix('TASK_TYPE.')}",
                metadata={"answer_type": str(row["answer_type"]), "window": row.get("context_window_id")},
                layout="system",
            )
            for index, row in enumerate(rows[:n])
        ]

    def score(self, answer: str, instance: Instance) -> float:
        """oolong-synth's scorer on the row-form gold."""
        return oolong_synth_score(answer, str(instance.gold), str(instance.metadata["answer_type"]))
