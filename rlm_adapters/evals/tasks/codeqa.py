"""CodeQA: LongBench v2's code-repository-understanding items, four-way multiple choice.

The items are read from a folder of ``<stem>.md`` question files and ``<stem>_context.txt`` contexts (the
shared data folder's layout, converted from LongBench v2 by longbench2_md); they are not shipped in the
package. The prompt asks for LongBench v2's answer format, and accuracy is the metric.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.scoring import choice_score
from rlm_adapters.evals.tasks.base import Instance, TaskName
from rlm_adapters.evals.tokens import count_tokens

SHARED_RELATIVE = Path("shared/data/longbench_v2_codeqa")
DATA_VARIABLE = "RLM_CODEQA_DIR"
QUESTION = (
    "What is the correct answer to this question: {question}\n"
    "Choices:\n(A) {A}\n(B) {B}\n(C) {C}\n(D) {D}\n\n"
    'Format your response as follows: "The correct answer is (insert answer here)".'
)


@dataclass(frozen=True)
class CodeQAItem:
    """One parsed question file."""

    stem: str
    question: str
    choices: dict[str, str]
    answer: str
    difficulty: str
    bucket: str


def default_data_dir() -> Path | None:
    """The CodeQA items' folder: ``$RLM_CODEQA_DIR``, else ``shared/data/...`` beside the working folder or
    beside a source checkout of this package (where the project keeps its benchmark data), when present."""
    explicit = os.environ.get(DATA_VARIABLE)
    if explicit:
        return Path(explicit) if Path(explicit).is_dir() else None
    checkout = Path(__file__).resolve().parents[3]
    for base in (Path.cwd(), Path.cwd().parent, checkout.parent):
        candidate = base / SHARED_RELATIVE
        if candidate.is_dir():
            return candidate
    return None


def _section(text: str, name: str) -> str:
    match = re.search(rf"^# {name}\s*\n(.*?)(?=^# |\Z)", text, flags=re.M | re.S)
    if match is None:
        raise ConfigurationError(f"CodeQA question file lacks a '# {name}' section")
    return match.group(1).strip()


def parse_item(path: Path) -> CodeQAItem:
    """Read one ``<stem>.md`` file."""
    text = path.read_text(encoding="utf-8")
    meta = dict(re.findall(r"^- (\w+): (.*)$", _section(text, "Metadata"), flags=re.M))
    choices = dict(re.findall(r"^- ([A-D]): (.*)$", _section(text, "Choices"), flags=re.M))
    answer = _section(text, "Answer")
    if sorted(choices) != ["A", "B", "C", "D"] or answer not in choices:
        raise ConfigurationError(f"CodeQA file {str(path)!r} needs choices A-D and a letter answer")
    return CodeQAItem(
        path.stem,
        _section(text, "Question"),
        choices,
        answer,
        meta.get("Difficulty", ""),
        meta.get("Length", ""),
    )


def load_items(data_dir: Path) -> list[CodeQAItem]:
    """Every item of `data_dir` that has its context file, sorted by name."""
    items = [parse_item(p) for p in sorted(data_dir.glob("*.md")) if not p.name.startswith("README")]
    return [item for item in items if (data_dir / f"{item.stem}_context.txt").is_file()]


class CodeQATask:
    """LongBench v2 CodeQA items; a length selects the items whose context has at most that many tokens.

    Args:
        data_dir: The items' folder (default: the shared data folder).
    """

    name: TaskName = "codeqa"

    def __init__(self, data_dir: Path | None = None) -> None:
        folder = data_dir or default_data_dir()
        if folder is None or not folder.is_dir():
            raise ConfigurationError("codeqa needs its data: pass --data-dir with the LongBench v2 CodeQA items")
        self.data_dir = folder
        self.items = load_items(folder)
        if not self.items:
            raise ConfigurationError(f"no CodeQA items (<stem>.md + <stem>_context.txt) in {str(folder)!r}")

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """Up to `n` items whose context fits in `length` tokens, in an order shuffled by `seed`.

        The instance's `length` is the limit (so results group by it); its measured size is in metadata.
        """
        order = random.Random(f"codeqa-{seed}").sample(self.items, len(self.items))
        instances = []
        for item in order:
            path = self.data_dir / f"{item.stem}_context.txt"
            if path.stat().st_size > length * 8:  # cheap bound before tokenising megabytes
                continue
            context = path.read_text(encoding="utf-8")
            tokens = count_tokens(context)
            if tokens > length:
                continue
            instances.append(
                Instance(
                    id=f"codeqa-{length}-{item.stem}",
                    task=self.name,
                    length=length,
                    context=context,
                    question=QUESTION.format(question=item.question, **item.choices),
                    gold=item.answer,
                    kind=item.difficulty,
                    metadata={"bucket": item.bucket, "tokens": tokens, "stem": item.stem},
                )
            )
            if len(instances) == n:
                break
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """1 when the chosen letter is the gold one."""
        return choice_score(answer, str(instance.gold))
