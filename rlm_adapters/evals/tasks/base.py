"""What every task family provides: seeded instances and a scorer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

TaskName = Literal["sniah", "oolong", "oolong-pairs", "codeqa"]
TASK_NAMES: tuple[TaskName, ...] = ("sniah", "oolong", "oolong-pairs", "codeqa")


@dataclass(frozen=True)
class Instance:
    """One evaluation item.

    Attributes:
        id: Stable id (task, length, seed and index), the key of the results file.
        task: The task family.
        length: Target length in tokens (CodeQA: the context's measured length).
        context: The long input, given to every arm unchanged.
        question: What the model must answer about the context (with the answer format).
        gold: The expected answer, in the task's own shape (str, number, or list of pairs).
        kind: The question kind (for OOLONG: ``most_common``, ``count``, ...).
        metadata: Anything else worth reporting (needle depth, label counts, ...).
    """

    id: str
    task: TaskName
    length: int
    context: str
    question: str
    gold: Any
    kind: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def digest(self) -> str:
        """sha256 of context, question and gold: equal digests mean byte-identical instances."""
        data = "\x00".join([self.id, self.context, self.question, repr(self.gold), self.kind])
        return hashlib.sha256(data.encode()).hexdigest()


class Task(Protocol):
    """A task family: builds instances at a length and scores answers."""

    name: TaskName

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` instances of about `length` tokens; the same seed gives byte-identical instances."""
        ...

    def score(self, answer: str, instance: Instance) -> float:
        """The score in [0, 1] of `answer` for `instance`."""
        ...


def instance_id(task: str, length: int, seed: int, index: int) -> str:
    """The id of the `index`-th instance of `task` at `length` for `seed`."""
    return f"{task}-{length}-s{seed}-{index:03d}"
