"""OOLONG trec_coarse context windows, built the way oolong-synth builds them.

What follows the original generator (abertsch72/oolong, ``src/data_gen/oolong-synth``: ``datasets_loader.py``,
``example_constructor.py``, ``utils.py``, ``EvalContextWindow.py``):

- Sizing: ``int((0.95 * L - 168 - 250) // 39)`` lines for a window of ``L`` tokens (its GPT-4 estimates of
  prompt, question and per-line tokens), so 3,182 lines at 131,072 and 787 at 32,768; nothing is tokenised.
- Labels: a temperature ``T`` in 2..6 per window, label weights ``softmax(randint(1, 30) ** (1 / T))`` over the
  six labels in a shuffled order, counts rounded (the first label absorbs the rounding); questions are drawn
  without replacement per label (a label with too few questions repeats its pool).
- Users: 10% of the line count are "common" five-digit IDs that take each line with probability 0.8; the
  other lines take an ID from the rest of 10000..99999.
- Dates: uniform over Feb 16, 2022 .. Jun 21, 2025, written ``%b %d, %Y``.
- Text: the intro ("The following lines contain N general-knowledge questions ..."), one line
  ``Date: ... || User: ... || Instance: ...`` per question in the original's order (sorted by question text,
  then permuted as ``datasets``' ``shuffle(seed=42)`` permutes, with numpy's generator), and the closing
  "Recall: the preceding lines ..." trailer.

Randomness comes from our own seeded generator, so windows are statistically, not byte-for-byte, those
of the published split (use ``--data-dir`` with exported rows for the published windows).
"""

from __future__ import annotations

import functools
import json
import math
import random
from dataclasses import dataclass
from datetime import date, timedelta
from importlib import resources
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.errors import ConfigurationError

# The original's label map order (0..5); a window shows them in a shuffled order.
TREC_LABELS = (
    "abbreviation",
    "entity",
    "description and abstract concept",
    "human being",
    "location",
    "numeric value",
)
PROMPT_TOKENS, QUESTION_TOKENS, PER_EXAMPLE_TOKENS = 168, 250, 39
FIRST_DAY, LAST_DAY = date(2022, 2, 16), date(2025, 6, 21)
MIN_ID, MAX_ID = 10_000, 99_999
LINE_ORDER_SEED = 42


@dataclass(frozen=True)
class Row:
    """One context line and its hidden gold label."""

    day: date
    user: int
    text: str
    label: str

    def render(self) -> str:
        """The line as the window shows it (without its newline)."""
        instance = self.text.replace("\n", " ")
        return f"Date: {self.day.strftime('%b %d, %Y')} || User: {self.user} || Instance: {instance}"


@dataclass(frozen=True)
class Window:
    """A generated window.

    Attributes:
        rows: The lines in generation order (the order the original's questions are computed in).
        shown: The same lines in the order the text shows them.
        counts: Label -> count, in the window's label order (zero counts included, as the original keeps).
        temperature: The label-skew temperature drawn for the window.
    """

    rows: tuple[Row, ...]
    shown: tuple[Row, ...]
    counts: dict[str, int]
    temperature: int

    def text(self) -> str:
        """The context: intro, one line per row, and the closing recall."""
        labels = list(self.counts)
        body = "".join(row.render() + "\n" for row in self.shown)
        return describe(len(self.rows), labels, intro=True) + body + describe(len(self.rows), labels, intro=False)


def examples_in_context(length: int) -> int:
    """The original's line count for a window of `length` tokens."""
    return int((length * 0.95 - PROMPT_TOKENS - QUESTION_TOKENS) // PER_EXAMPLE_TOKENS)


def describe(count: int, labels: list[str], intro: bool) -> str:
    """The original's trec_coarse description, before (intro) or after the lines."""
    start = "The following" if intro else "Recall: the preceding"
    quoted = ", ".join(f"'{label}'" for label in labels)
    specific = (
        "general-knowledge questions, one per line. Each question has an answer that can be described as one "
        f"of {len(labels)} categories: {quoted}."
    )
    return (
        f"{start} lines contain {count} {specific}\n\nYou will be asked to answer questions about the aggregate "
        f"label statistics across all {count} examples in this dataset. Do not try to guess, estimate, or "
        "approximate the result. Calculate the exact answer given these datapoints.\n\n"
    )


@functools.cache
def load_pool() -> dict[str, tuple[str, ...]]:
    """The shipped trec_coarse pool: label -> questions, in file order."""
    raw = resources.files("rlm_adapters.evals").joinpath("data/trec_coarse_validated.jsonl").read_text("utf-8")
    pool: dict[str, list[str]] = {label: [] for label in TREC_LABELS}
    for line in raw.split("\n"):
        if not line.strip():
            continue
        record = json.loads(line)
        pool[record["label"]].append(record["input"])
    return {label: tuple(items) for label, items in pool.items()}


def label_counts(rng: random.Random, labels: list[str], total: int, temperature: int) -> list[int]:
    """The original's per-label counts: softmax of ``randint(1, 30) ** (1 / T)``, rounded to `total`."""
    weights = [rng.randint(1, 30) ** (1 / temperature) for _ in labels]
    top = max(weights)
    exps = [math.exp(w - top) for w in weights]
    counts = [round(e / sum(exps) * total) for e in exps]  # round half to even, as torch.round
    counts[0] -= sum(counts) - total
    # The original can leave the first count below zero after the correction; it then samples nothing.
    counts[0] = max(0, counts[0])
    return counts


def skewed_users(rng: random.Random, count: int) -> list[int]:
    """The original's user IDs: 10% common IDs take each line with probability 0.8."""
    common = rng.sample(range(MIN_ID, MAX_ID + 1), max(int(count * 0.1), 1))
    taken = set(common)
    users = []
    for _ in range(count):
        if rng.random() < 0.8:
            users.append(rng.choice(common))
            continue
        user = rng.randint(MIN_ID, MAX_ID)
        while user in taken:
            user = rng.randint(MIN_ID, MAX_ID)
        users.append(user)
    return users


def random_days(rng: random.Random, count: int) -> list[date]:
    """Dates drawn uniformly over the original's range, both ends included."""
    span = (LAST_DAY - FIRST_DAY).days + 1
    return [FIRST_DAY + timedelta(days=rng.randint(0, span - 1)) for _ in range(count)]


def shown_order(rows: list[Row]) -> list[Row]:
    """The order the original writes lines in: sorted by text, then ``datasets``' ``shuffle(seed=42)``."""
    numpy: Any = require("numpy", extra="eval", feature="OOLONG windows")
    ordered = sorted(rows, key=lambda row: row.text)
    permutation = numpy.random.default_rng(LINE_ORDER_SEED).permutation(len(ordered))
    return [ordered[int(i)] for i in permutation]


def build_window(rng: random.Random, length: int) -> Window:
    """A window of nominally `length` tokens.

    Raises:
        ConfigurationError: when `length` leaves room for no line.
    """
    total = examples_in_context(length)
    if total < 1:
        raise ConfigurationError(f"OOLONG window length {length!r} is too small: it leaves room for no line")
    pool = load_pool()
    labels = list(TREC_LABELS)
    rng.shuffle(labels)
    temperature = rng.randint(2, 6)
    counts = label_counts(rng, labels, total, temperature)
    texts: list[tuple[str, str]] = []
    for label, count in zip(labels, counts, strict=True):
        available = pool[label]
        copies = list(available) * max(1, math.ceil(count / len(available)))
        texts += [(copies[i], label) for i in rng.sample(range(len(copies)), count)]
    rng.shuffle(texts)
    users = skewed_users(rng, len(texts))
    days = random_days(rng, len(texts))
    rows = [Row(day, user, text, label) for (text, label), user, day in zip(texts, users, days, strict=True)]
    return Window(
        rows=tuple(rows),
        shown=tuple(shown_order(rows)),
        counts=dict(zip(labels, counts, strict=True)),
        temperature=temperature,
    )
