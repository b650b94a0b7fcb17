"""Legacy OOLONG (``--protocol legacy``), this harness's generator before it followed oolong-synth.

OOLONG-synth trec_coarse: aggregate questions over a window of labelled TREC questions.

Contexts follow the benchmark's generator: lines ``Date: <date> || User: <id> || Instance: <question>``
sampled from the real validated pool (shipped as package data with its MIT licence), gold labels hidden,
after a header naming the six labels and asking for exact answers. The label mix is skewed (label weights
``u ** t`` for a temperature t in 2..6, as the original draws a temperature per window) and users follow a
heavy-tailed (Zipf) distribution. Question kinds are the benchmark's three groups: counting (most / least
common label, label A vs B, count of a label), user (most frequent user, most common label of one user)
and timeline (count in a month, month with the most of a label).
"""

from __future__ import annotations

import functools
import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass
from datetime import date, timedelta
from importlib import resources
from typing import Any

from rlm_adapters.evals.paper_scoring import oolong_synth_score
from rlm_adapters.evals.protocol import ScoringName
from rlm_adapters.evals.scoring import oolong_score
from rlm_adapters.evals.tasks.base import Instance, TaskName, instance_id
from rlm_adapters.evals.tokens import count_tokens

LABELS = (
    "abbreviation",
    "entity",
    "description and abstract concept",
    "human being",
    "location",
    "numeric value",
)
HEADER = (
    "The following lines contain {n} general-knowledge questions, one per line. Each line has a date, a user "
    "ID and a question. The answer to each question belongs to one of 6 categories: {labels}. You will be "
    "asked about the aggregate label statistics of all {n} examples; the labels are not shown, so classify "
    "each question yourself. Work out the exact answer; do not guess or estimate.\n\n"
)
KINDS = (
    "most_common",
    "least_common",
    "compare",
    "count",
    "top_user",
    "user_label",
    "month_count",
    "top_month",
)
START = date(2023, 1, 1)
DAYS = 546  # a year and a half, so that month questions have a dozen-plus months to choose from


@dataclass(frozen=True)
class Line:
    """One context line and its hidden gold label."""

    day: date
    user: int
    text: str
    label: str

    def render(self) -> str:
        """The line as it appears in the context."""
        return f"Date: {self.day.strftime('%b %d, %Y')} || User: {self.user} || Instance: {self.text}"


@functools.cache
def load_pool() -> dict[str, tuple[str, ...]]:
    """The shipped pool: label -> questions, in file order."""
    raw = resources.files("rlm_adapters.evals").joinpath("data/trec_coarse_validated.jsonl").read_text("utf-8")
    pool: dict[str, list[str]] = {label: [] for label in LABELS}
    for row in raw.splitlines():
        record = json.loads(row)
        pool[record["label"]].append(record["input"])
    return {label: tuple(items) for label, items in pool.items()}


def month_name(key: str) -> str:
    """``2023-03`` -> ``March 2023``."""
    year, month = key.split("-")
    return date(int(year), int(month), 1).strftime("%B %Y")


def build_window(rng: random.Random, length: int) -> tuple[str, list[Line]]:
    """A context of about `length` tokens and its lines."""
    pool = load_pool()
    temperature = rng.randint(2, 6)
    weights = [rng.uniform(0.05, 1.0) ** temperature for _ in LABELS]
    # Zipf over users (weight 1/rank): a few users dominate, most appear a handful of times. The user
    # count grows with the window (about one per 300 tokens) so that pair questions stay tractable.
    users = rng.sample(range(10_000, 100_000), k=max(8, min(200, length // 300)))
    cumulative = list(itertools.accumulate(1 / rank for rank in range(1, len(users) + 1)))
    shuffled = {label: rng.sample(items, len(items)) for label, items in pool.items()}
    used = dict.fromkeys(LABELS, 0)
    header_cost = count_tokens(HEADER.format(n=10_000, labels=_quoted()))
    lines: list[Line] = []
    tokens = header_cost
    while True:
        label = rng.choices(LABELS, weights)[0]
        # Cycle through each label's shuffled questions; longer windows than the pool repeat questions.
        text = shuffled[label][used[label] % len(shuffled[label])]
        used[label] += 1
        user = rng.choices(users, cum_weights=cumulative)[0]
        line = Line(START + timedelta(days=rng.randrange(DAYS)), user, text, label)
        cost = count_tokens(line.render() + "\n")
        if tokens + cost > length and lines:
            break
        lines.append(line)
        tokens += cost
    context = HEADER.format(n=len(lines), labels=_quoted()) + "\n".join(line.render() for line in lines)
    return context, lines


def _quoted() -> str:
    return ", ".join(f"'{label}'" for label in LABELS)


def _unique_max(counter: Counter[Any], least: bool = False) -> Any | None:
    items = counter.most_common()
    if least:
        items = items[::-1]
    if not items or (len(items) > 1 and items[0][1] == items[1][1]):
        return None
    return items[0][0]


def make_question(kind: str, lines: list[Line], rng: random.Random) -> tuple[str, Any, str] | None:
    """(question, gold, answer type) of `kind` over `lines`, or None when its gold would be a tie."""
    labels = Counter({label: 0 for label in LABELS})
    labels.update(line.label for line in lines)
    label = rng.choice(LABELS)
    if kind in ("most_common", "least_common"):
        gold = _unique_max(labels, least=kind == "least_common")
        word = "most" if kind == "most_common" else "least"
        question = (
            f"In the above data, which of the labels is the {word} common? Give your final answer in "
            "the form 'Label: answer' where answer is one of the labels."
        )
        return None if gold is None else (question, gold, "label")
    if kind == "compare":
        other = rng.choice([x for x in LABELS if x != label])
        a, b = labels[label], labels[other]
        gold = "more common than" if a > b else "less common than" if a < b else "same frequency as"
        question = (
            f"In the above data, is label '{label}' more common, less common, or the same frequency "
            f"as label '{other}'? Give your final answer in the form 'Answer: {label} is [X] "
            f"{other}', where [X] is 'more common than', 'less common than', or 'same frequency as'."
        )
        return question, gold, "comparison"
    if kind == "count":
        question = (
            f"In the above data, how many data points should be classified as label '{label}'? "
            "Give your final answer in the form 'Answer: number'."
        )
        return question, labels[label], "number"
    if kind == "top_user":
        gold = _unique_max(Counter(line.user for line in lines))
        question = (
            "In the above data, which user ID has the most instances? Give your final answer in the form 'User: id'."
        )
        return None if gold is None else (question, gold, "user")
    if kind == "user_label":
        busiest = Counter(line.user for line in lines).most_common(3)
        user = rng.choice(busiest)[0]
        gold = _unique_max(Counter(line.label for line in lines if line.user == user))
        question = (
            f"Considering only the instances of user {user}, which label is the most common? Give your "
            "final answer in the form 'Label: answer' where answer is one of the labels."
        )
        return None if gold is None else (question, gold, "label")
    months = sorted({line.day.strftime("%Y-%m") for line in lines})
    if kind == "month_count":
        month = rng.choice(months)
        gold = sum(line.label == label and line.day.strftime("%Y-%m") == month for line in lines)
        question = (
            f"Considering only the instances dated in {month_name(month)}, how many should be "
            f"classified as label '{label}'? Give your final answer in the form 'Answer: number'."
        )
        return question, gold, "number"
    gold = _unique_max(Counter(line.day.strftime("%Y-%m") for line in lines if line.label == label))
    question = (
        f"In the above data, in which month were there the most instances of label '{label}'? Give "
        "your final answer in the form 'Date: Month YYYY'."
    )
    return None if gold is None else (question, gold, "date")


# The legacy answer types as oolong-synth's, for ``--scoring paper`` (a month answer is a string match).
SYNTH_TYPES = {
    "label": "ANSWER_TYPE.LABEL",
    "comparison": "ANSWER_TYPE.COMPARISON",
    "number": "ANSWER_TYPE.NUMERIC",
    "user": "ANSWER_TYPE.USER",
    "date": "ANSWER_TYPE.MONTH_YEAR",
}


class LegacyOolongTask:
    """OOLONG trec_coarse at a chosen length; question kinds rotate over the instances.

    Args:
        scoring: ``lenient`` (this harness's scorer) or ``paper`` (oolong-synth's decisions).
    """

    name: TaskName = "oolong"
    protocol = "legacy"

    def __init__(self, scoring: ScoringName = "lenient") -> None:
        self.scoring = scoring

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` windows of about `length` tokens (o200k_base), one question each."""
        rng = random.Random(f"oolong-{seed}-{length}")
        instances = []
        for index in range(n):
            context, lines = build_window(rng, length)
            for offset in range(len(KINDS)):
                kind = KINDS[(index + offset) % len(KINDS)]
                made = make_question(kind, lines, rng)
                if made is not None:
                    break
            assert made is not None  # "compare" and "count" never tie, so the loop always finds one
            question, gold, answer_type = made
            instances.append(
                Instance(
                    id=instance_id(self.name, length, seed, index),
                    task=self.name,
                    length=length,
                    context=context,
                    question=question,
                    gold=gold,
                    kind=kind,
                    metadata={"answer_type": answer_type, "lines": len(lines)},
                )
            )
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """The lenient scorer, or oolong-synth's on the gold written as the original writes it."""
        answer_type = str(instance.metadata["answer_type"])
        if self.scoring == "lenient":
            return oolong_score(answer, instance.gold, answer_type)
        gold = instance.gold
        if answer_type == "date":
            gold = month_name(str(gold))
        return oolong_synth_score(answer, str([gold]), SYNTH_TYPES[answer_type])
