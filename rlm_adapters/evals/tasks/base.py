"""What every task family provides: seeded instances and a scorer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rlm_adapters.core.lm import Message

TaskName = Literal["sniah", "oolong", "oolong-pairs", "codeqa"]
TASK_NAMES: tuple[TaskName, ...] = ("sniah", "oolong", "oolong-pairs", "codeqa")
Layout = Literal["joined", "wrapped", "system"]
SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class Instance:
    """One evaluation item.

    Attributes:
        id: Stable id (task, length, and seed and index, or the CodeQA item or exported row it comes from), part
            of each result's key.
        task: The task family.
        length: Target length in tokens (CodeQA: the context's measured length).
        context: The long input, given to every arm unchanged.
        question: What the model must answer about the context (with the answer format).
        gold: The expected answer, in the task's own shape (str, number, or list of pairs).
        kind: The question kind (for OOLONG: ``most_common``, ``count``, ...).
        metadata: Anything else worth reporting (needle depth, label counts, ...).
        layout: How the ``direct`` arm sends it, as the original benchmark does: ``joined`` (one user
            message, context then question), ``wrapped`` (one user message ``prompt_head + context +
            prompt_tail``: RULER, LongBench) or ``system`` (OOLONG: the context in the system message after
            "You are a helpful assistant.", the question as the user message).
        prompt_head: Text before the context in a ``wrapped`` prompt.
        prompt_tail: Text after the context in a ``wrapped`` prompt.
        direct_prompt: The exact single user message for ``direct`` when it is not head + context + tail
            (LongBench's middle truncation).
    """

    id: str
    task: TaskName
    length: int
    context: str
    question: str
    gold: Any
    kind: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    layout: Layout = "joined"
    prompt_head: str = ""
    prompt_tail: str = ""
    direct_prompt: str | None = None

    def digest(self) -> str:
        """sha256 of everything a model is shown and the gold: equal digests mean byte-identical instances."""
        parts = [self.id, self.context, self.question, repr(self.gold), self.kind, self.layout]
        parts += [self.prompt_head, self.prompt_tail, self.direct_prompt or ""]
        return hashlib.sha256("\x00".join(parts).encode()).hexdigest()

    def direct_messages(self) -> list[Message]:
        """The messages the ``direct`` arm sends, laid out as the original benchmark lays them out."""
        if self.direct_prompt is not None:
            return [{"role": "user", "content": self.direct_prompt}]
        if self.layout == "wrapped":
            return [{"role": "user", "content": self.prompt_head + self.context + self.prompt_tail}]
        if self.layout == "system":
            return [
                {"role": "system", "content": f"{SYSTEM_PROMPT}\n\n{self.context}"},
                {"role": "user", "content": self.question},
            ]
        return [{"role": "user", "content": f"{self.context}\n\n{self.question}"}]


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
