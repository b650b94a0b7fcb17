"""Legacy OOLONG-Pairs (``--protocol legacy``): twenty conditions of our own, not the paper's.

OOLONG-Pairs: pairs of users meeting label and date conditions, over OOLONG trec_coarse windows.

The RLM paper's OOLONG-Pairs asks for every pair of user IDs that both (or each) satisfy conditions on
their instances' labels and dates; the twenty kinds here are ours (the paper's own are in `oolong_pairs`).
Gold pairs come from the hidden line labels; answers are scored by F1 over the set of pairs.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

from rlm_adapters.evals.paper_scoring import paper_pairs_f1
from rlm_adapters.evals.protocol import ScoringName
from rlm_adapters.evals.scoring import pairs_f1
from rlm_adapters.evals.tasks.base import Instance, TaskName, instance_id
from rlm_adapters.evals.tasks.oolong_legacy import Line, build_window

CUT = date(2023, 12, 31)
FORMAT = " List every such pair once, lower ID first, one per line, as (id1, id2). If no pair qualifies, answer None."
NUM, LOC, HUM, ENT, DESC, ABBR = (
    "numeric value",
    "location",
    "human being",
    "entity",
    "description and abstract concept",
    "abbreviation",
)


@dataclass
class UserStats:
    """What the conditions look at: one user's labels and dates."""

    labels: Counter[str] = field(default_factory=Counter)
    days: dict[str, list[date]] = field(default_factory=lambda: defaultdict(list))

    def has(self, label: str) -> bool:
        """At least one instance with `label`."""
        return self.labels[label] > 0

    def after(self, label: str) -> bool:
        """At least one `label` instance dated after the cut (Dec 31, 2023)."""
        return any(day > CUT for day in self.days[label])

    def before(self, label: str) -> bool:
        """At least one `label` instance dated on or before the cut."""
        return any(day <= CUT for day in self.days[label])


Condition = Callable[[UserStats], bool]
# (question text, condition on the first user, condition on the second user or None when symmetric)
QUERIES: tuple[tuple[str, Condition, Condition | None], ...] = (
    (
        f"both users have at least one instance with label '{NUM}' or '{LOC}'",
        lambda u: u.has(NUM) or u.has(LOC),
        None,
    ),
    (f"both users have at least one instance with label '{HUM}'", lambda u: u.has(HUM), None),
    (
        f"both users have at least one '{ENT}' instance and at least one '{LOC}' instance",
        lambda u: u.has(ENT) and u.has(LOC),
        None,
    ),
    (f"both users have at least two instances with label '{DESC}'", lambda u: u.labels[DESC] >= 2, None),
    (f"both users have at least one instance with label '{ABBR}'", lambda u: u.has(ABBR), None),
    (
        f"both users have at least one '{HUM}' instance and no '{ENT}' instance",
        lambda u: u.has(HUM) and not u.has(ENT),
        None,
    ),
    (
        "both users have all of their instances dated on or before Dec 31, 2023",
        lambda u: all(d <= CUT for days in u.days.values() for d in days),
        None,
    ),
    (f"both users have at least one '{LOC}' instance dated after Dec 31, 2023", lambda u: u.after(LOC), None),
    (
        f"both users have at least one '{NUM}' instance dated on or before Dec 31, 2023",
        lambda u: u.before(NUM),
        None,
    ),
    (f"both users have exactly one instance with label '{ENT}'", lambda u: u.labels[ENT] == 1, None),
    (
        f"both users have more '{HUM}' instances than '{LOC}' instances",
        lambda u: u.labels[HUM] > u.labels[LOC],
        None,
    ),
    (
        f"both users have at least three instances in total and at least one with label '{ENT}'",
        lambda u: sum(u.labels.values()) >= 3 and u.has(ENT),
        None,
    ),
    (
        f"one user has at least one '{ABBR}' instance and the other has at least one '{NUM}' instance",
        lambda u: u.has(ABBR),
        lambda u: u.has(NUM),
    ),
    (
        f"one user has at least two '{LOC}' instances and the other has no '{LOC}' instance",
        lambda u: u.labels[LOC] >= 2,
        lambda u: not u.has(LOC),
    ),
    (
        f"one user has a '{HUM}' instance dated after Dec 31, 2023 and the other has an '{ENT}' instance "
        "dated on or before Dec 31, 2023",
        lambda u: u.after(HUM),
        lambda u: u.before(ENT),
    ),
    (
        f"both users have at least one '{DESC}' instance and at least one '{HUM}' instance",
        lambda u: u.has(DESC) and u.has(HUM),
        None,
    ),
    ("both users have instances with at least three different labels", lambda u: len(+u.labels) >= 3, None),
    (
        f"both users have only instances labelled '{DESC}' or '{ENT}'",
        lambda u: set(+u.labels) <= {DESC, ENT},
        None,
    ),
    (
        f"one user has at least one '{ABBR}' instance and the other has at least one '{LOC}' instance",
        lambda u: u.has(ABBR),
        lambda u: u.has(LOC),
    ),
    (
        f"both users have an '{ENT}' instance dated after Dec 31, 2023 and at least one '{NUM}' instance",
        lambda u: u.after(ENT) and u.has(NUM),
        None,
    ),
)


def user_stats(lines: list[Line]) -> dict[int, UserStats]:
    """Per-user label counts and dates."""
    stats: dict[int, UserStats] = defaultdict(UserStats)
    for line in lines:
        stats[line.user].labels[line.label] += 1
        stats[line.user].days[line.label].append(line.day)
    return dict(stats)


def gold_pairs(lines: list[Line], first: Condition, second: Condition | None) -> list[list[int]]:
    """Sorted ``[low, high]`` pairs of distinct users meeting the condition(s), either order."""
    stats = user_stats(lines)
    users = sorted(stats)
    other = second or first
    pairs = []
    for i, a in enumerate(users):
        for b in users[i + 1 :]:
            sa, sb = stats[a], stats[b]
            if (first(sa) and other(sb)) or (first(sb) and other(sa)):
                pairs.append([a, b])
    return pairs


class LegacyOolongPairsTask:
    """Twenty pair-query kinds over OOLONG trec_coarse windows, rotated over the instances.

    Args:
        scoring: ``lenient`` or ``paper`` (see `rlm_adapters.evals.paper_scoring`).
    """

    name: TaskName = "oolong-pairs"
    protocol = "legacy"

    def __init__(self, scoring: ScoringName = "lenient") -> None:
        self.scoring = scoring

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` windows of about `length` tokens, one pair question each."""
        rng = random.Random(f"oolong-pairs-{seed}-{length}")
        instances = []
        for index in range(n):
            number = index % len(QUERIES)
            text, first, second = QUERIES[number]
            # A skewed window can lack a label entirely, leaving no pair; "None" would then score 1, so
            # draw a few windows (deterministically) before accepting an empty gold set.
            for _ in range(8):
                context, lines = build_window(rng, length)
                gold = gold_pairs(lines, first, second)
                if gold:
                    break
            question = (
                f"In the above data, list all pairs of user IDs such that {text}. The labels are not "
                "shown: classify each question yourself." + FORMAT
            )
            instances.append(
                Instance(
                    id=instance_id(self.name, length, seed, index),
                    task=self.name,
                    length=length,
                    context=context,
                    question=question,
                    gold=gold,
                    kind=f"pairs_{number + 1:02d}",
                    metadata={
                        "lines": len(lines),
                        "users": len({line.user for line in lines}),
                        "gold_pairs": len(gold),
                    },
                )
            )
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """F1 over the pairs."""
        if self.scoring == "paper":
            return paper_pairs_f1(answer, instance.gold)
        return pairs_f1(answer, instance.gold)
