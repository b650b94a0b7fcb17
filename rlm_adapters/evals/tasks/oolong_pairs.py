"""OOLONG-Pairs: the RLM paper's 20 queries over oolong-synth trec_coarse windows.

The query texts are Appendix E.1 of "Recursive Language Models" (Zhang, Kraska, Khattab; arXiv 2512.24601v1),
verbatim, with the output instructions the paper's own trajectory shows (Appendix B.2): pairs as
``(user_id_1, user_id_2)``, one per line, sorted by first ID, ``[]`` when there is none. Windows are built as
oolong-synth builds them (`oolong_window`; the paper reports 32K); instance ``i`` asks query ``i % 20 + 1``
over window ``i // 20``. Gold pairs come from the hidden labels; the score is F1 over the set of pairs.

Condition wording read literally: "after" / "before" a date are strict, and "all instances that are X ...
must be after D" holds for a user with no X instance.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

from rlm_adapters.evals.scorers import pairs_f1
from rlm_adapters.evals.tasks.base import Instance, TaskName, instance_id
from rlm_adapters.evals.tasks.oolong_window import Row, build_window

NUM, LOC, HUM, ENT, DESC, ABBR = (
    "numeric value",
    "location",
    "human being",
    "entity",
    "description and abstract concept",
    "abbreviation",
)
OPENING = "In the above data, list all pairs of user IDs (no duplicate pairs, list lower ID first) "
LABELS_NOTE = (
    " Each of the questions can be labelled as one of the labels (the data does not provide the labels, you need "
    "to figure out the label from the semantics of the question): description and abstract concept, entity, human "
    "being, numeric value, location, abbreviation."
)
OUTPUT_FORMAT = (
    " In your answer, list all pairs in the format (user_id_1, user_id_2), separated by newlines. Your answer must "
    "be sorted by first user ID. For example, if the answer is the Instance ID pairs (22740, 35839) and (35839, "
    "52032), you should return `(22740, 35839), (35839, 52032)`. If there is no answer, return an empty list []."
)


@dataclass
class UserStats:
    """What the conditions look at: one user's label counts and dates."""

    labels: Counter[str] = field(default_factory=Counter)
    days: dict[str, list[date]] = field(default_factory=lambda: defaultdict(list))

    def n(self, label: str) -> int:
        """Instances with `label`."""
        return self.labels[label]

    def all_after(self, label: str, day: date) -> bool:
        """Every `label` instance is dated strictly after `day` (true when there is none)."""
        return all(d > day for d in self.days[label])

    def all_before(self, label: str, day: date) -> bool:
        """Every `label` instance is dated strictly before `day` (true when there is none)."""
        return all(d < day for d in self.days[label])


Condition = Callable[[UserStats], bool]


@dataclass(frozen=True)
class PairQuery:
    """One of the paper's queries: its condition text and the condition on each user of a pair."""

    clause: str
    first: Condition
    second: Condition | None = None  # None: both users must meet `first`

    def text(self) -> str:
        """The full query as asked."""
        return OPENING + self.clause + LABELS_NOTE + OUTPUT_FORMAT


def _either(a: str, b: str) -> Condition:
    return lambda u: u.n(a) > 0 or u.n(b) > 0


QUERIES: tuple[PairQuery, ...] = (
    PairQuery("where both users have at least one instance with a numeric value or location.", _either(NUM, LOC)),
    PairQuery("where both users have at least one instance with an entity or human being.", _either(ENT, HUM)),
    PairQuery(
        "where both users have at least one instance with a description and abstract concept or abbreviation.",
        _either(DESC, ABBR),
    ),
    PairQuery(
        "where both users have at least one instance with a human being or location, and all instances that are a "
        "human being for both users must be after January 6, 2023.",
        lambda u: _either(HUM, LOC)(u) and u.all_after(HUM, date(2023, 1, 6)),
    ),
    PairQuery(
        "where both users have at least one instance with an entity or numeric value, and all instances that are an "
        "entity for both users must be before March 15, 2023.",
        lambda u: _either(ENT, NUM)(u) and u.all_before(ENT, date(2023, 3, 15)),
    ),
    PairQuery("where both users have at least one instance with a location or abbreviation.", _either(LOC, ABBR)),
    PairQuery(
        "where both users have at least one instance with a description and abstract concept or numeric value, and "
        "all instances that are a numeric value for both users must be after February 1, 2023.",
        lambda u: _either(DESC, NUM)(u) and u.all_after(NUM, date(2023, 2, 1)),
    ),
    PairQuery(
        "where both users have at least one instance with a human being or description and abstract concept.",
        _either(HUM, DESC),
    ),
    PairQuery(
        "where both users have at least one instance with an entity or location, and all instances that are a "
        "location for both users must be after April 10, 2023.",
        lambda u: _either(ENT, LOC)(u) and u.all_after(LOC, date(2023, 4, 10)),
    ),
    PairQuery(
        "where both users have at least one instance with a numeric value or abbreviation, and all instances that "
        "are an abbreviation for both users must be before May 20, 2023.",
        lambda u: _either(NUM, ABBR)(u) and u.all_before(ABBR, date(2023, 5, 20)),
    ),
    PairQuery(
        "such that one user has at least one instance with entity and one with abbreviation, and the other user has "
        "exactly one instance with entity.",
        lambda u: u.n(ENT) >= 1 and u.n(ABBR) >= 1,
        lambda u: u.n(ENT) == 1,
    ),
    PairQuery(
        "such that one user has at least two instances with numeric value, and the other user has at least one "
        "instance with location and at least one instance with human being.",
        lambda u: u.n(NUM) >= 2,
        lambda u: u.n(LOC) >= 1 and u.n(HUM) >= 1,
    ),
    PairQuery(
        "such that one user has exactly one instance with description and abstract concept, and the other user has "
        "at least one instance with abbreviation and at least one instance with entity.",
        lambda u: u.n(DESC) == 1,
        lambda u: u.n(ABBR) >= 1 and u.n(ENT) >= 1,
    ),
    PairQuery(
        "such that one user has at least one instance with human being and at least one instance with numeric value, "
        "and the other user has exactly two instances with location.",
        lambda u: u.n(HUM) >= 1 and u.n(NUM) >= 1,
        lambda u: u.n(LOC) == 2,
    ),
    PairQuery(
        "such that one user has at least one instance with entity, at least one instance with location, and at least "
        "one instance with abbreviation, and the other user has exactly one instance with numeric value.",
        lambda u: u.n(ENT) >= 1 and u.n(LOC) >= 1 and u.n(ABBR) >= 1,
        lambda u: u.n(NUM) == 1,
    ),
    PairQuery(
        "such that one user has at least one instance with description and abstract concept and at least one "
        "instance with human being, and the other user has at least two instances with entity and exactly one "
        "instance with abbreviation.",
        lambda u: u.n(DESC) >= 1 and u.n(HUM) >= 1,
        lambda u: u.n(ENT) >= 2 and u.n(ABBR) == 1,
    ),
    PairQuery(
        "such that one user has exactly one instance with numeric value, and the other user has at least one "
        "instance with location and at least one instance with description and abstract concept.",
        lambda u: u.n(NUM) == 1,
        lambda u: u.n(LOC) >= 1 and u.n(DESC) >= 1,
    ),
    PairQuery(
        "such that one user has at least one instance with abbreviation and exactly one instance with human being, "
        "and the other user has at least one instance with entity and at least one instance with numeric value.",
        lambda u: u.n(ABBR) >= 1 and u.n(HUM) == 1,
        lambda u: u.n(ENT) >= 1 and u.n(NUM) >= 1,
    ),
    PairQuery(
        "such that one user has at least two instances with location and at least one instance with entity, and the "
        "other user has exactly one instance with description and abstract concept and exactly one instance with "
        "abbreviation.",
        lambda u: u.n(LOC) >= 2 and u.n(ENT) >= 1,
        lambda u: u.n(DESC) == 1 and u.n(ABBR) == 1,
    ),
    PairQuery(
        "such that one user has at least one instance with numeric value and at least one instance with human being, "
        "and the other user has at least one instance with location, at least one instance with entity, and exactly "
        "one instance with abbreviation.",
        lambda u: u.n(NUM) >= 1 and u.n(HUM) >= 1,
        lambda u: u.n(LOC) >= 1 and u.n(ENT) >= 1 and u.n(ABBR) == 1,
    ),
)


def user_stats(rows: tuple[Row, ...] | list[Row]) -> dict[int, UserStats]:
    """Per-user label counts and dates."""
    stats: dict[int, UserStats] = defaultdict(UserStats)
    for row in rows:
        stats[row.user].labels[row.label] += 1
        stats[row.user].days[row.label].append(row.day)
    return dict(stats)


def gold_pairs(rows: tuple[Row, ...] | list[Row], query: PairQuery) -> list[list[int]]:
    """Sorted ``[low, high]`` pairs of distinct users that meet `query` (in either role when asymmetric)."""
    stats = user_stats(rows)
    users = sorted(stats)
    first = {user: query.first(stats[user]) for user in users}
    second = first if query.second is None else {user: query.second(stats[user]) for user in users}
    return [
        [a, b]
        for i, a in enumerate(users)
        for b in users[i + 1 :]
        if (first[a] and second[b]) or (first[b] and second[a])
    ]


class OolongPairsTask:
    """The paper's twenty pair queries over oolong-synth trec_coarse windows."""

    name: TaskName = "oolong-pairs"

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` instances: the twenty queries in order over each window of about `length` tokens."""
        instances = []
        context = ""
        rows: tuple[Row, ...] = ()
        for index in range(n):
            number, window = index % len(QUERIES), index // len(QUERIES)
            if number == 0:
                built = build_window(random.Random(f"oolong-pairs-paper-{seed}-{length}-{window}"), length)
                context, rows = built.text(), built.rows
            query = QUERIES[number]
            gold = gold_pairs(rows, query)
            instances.append(
                Instance(
                    id=instance_id(self.name, length, seed, index),
                    task=self.name,
                    length=length,
                    context=context,
                    question=query.text(),
                    gold=gold,
                    kind=f"task_{number + 1:02d}",
                    metadata={
                        "window": window,
                        "lines": len(rows),
                        "users": len({row.user for row in rows}),
                        "gold_pairs": len(gold),
                    },
                    layout="system",
                )
            )
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """F1 over the pairs written in the paper's format."""
        return pairs_f1(answer, instance.gold)
