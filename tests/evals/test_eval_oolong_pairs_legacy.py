import functools
import json
import re
from collections import defaultdict
from datetime import datetime
from itertools import combinations
from pathlib import Path

import rlm_adapters.evals
from rlm_adapters.evals.tasks.oolong_pairs_legacy import QUERIES
from rlm_adapters.evals.tasks.oolong_pairs_legacy import LegacyOolongPairsTask as OolongPairsTask

DATA = Path(rlm_adapters.evals.__file__).parent / "data" / "trec_coarse_validated.jsonl"
LINE = re.compile(r"^Date: (\w{3} \d{2}, \d{4}) \|\| User: (\d+) \|\| Instance: (.+)$")
CUT = datetime(2023, 12, 31)


@functools.cache
def pool_labels() -> dict[str, str]:
    return {row["input"]: row["label"] for row in map(json.loads, DATA.read_text().splitlines())}


def users_of(context: str) -> dict[int, list[tuple[datetime, str]]]:
    labels = pool_labels()
    users: dict[int, list[tuple[datetime, str]]] = defaultdict(list)
    for line in context.splitlines():
        match = LINE.match(line)
        if match:
            users[int(match.group(2))].append((datetime.strptime(match.group(1), "%b %d, %Y"), labels[match.group(3)]))
    return users


# Independent restatements of a few query kinds (numbered as in the task).
def has(rows, label):
    return any(lab == label for _, lab in rows)


RECOUNT = {
    1: (lambda r: has(r, "numeric value") or has(r, "location"), None),
    8: (lambda r: any(lab == "location" and d > CUT for d, lab in r), None),
    13: (lambda r: has(r, "abbreviation"), lambda r: has(r, "numeric value")),
    14: (lambda r: sum(lab == "location" for _, lab in r) >= 2, lambda r: not has(r, "location")),
    17: (lambda r: len({lab for _, lab in r}) >= 3, None),
}


def test_twenty_kinds_rotate_and_are_deterministic():
    instances = OolongPairsTask().generate(2048, 20, seed=4)
    assert len(QUERIES) == 20
    assert [x.kind for x in instances] == [f"pairs_{i:02d}" for i in range(1, 21)]
    again = OolongPairsTask().generate(2048, 20, seed=4)
    assert [x.digest() for x in instances] == [x.digest() for x in again]


def test_gold_pairs_match_an_independent_recount():
    instances = OolongPairsTask().generate(4096, 20, seed=9)
    nonempty = 0
    for instance in instances:
        users = users_of(instance.context)
        assert all(a < b and a in users and b in users for a, b in instance.gold)
        number = int(instance.kind.split("_")[1])
        if number not in RECOUNT:
            continue
        first, second = RECOUNT[number]
        second = second or first
        want = sorted(
            [a, b]
            for a, b in combinations(sorted(users), 2)
            if (first(users[a]) and second(users[b])) or (first(users[b]) and second(users[a]))
        )
        assert instance.gold == want, instance.kind
        nonempty += bool(want)
    assert nonempty == len(RECOUNT)
    # Windows are redrawn until some pair qualifies, so "None" is never a free full score here.
    assert all(instance.gold for instance in instances)


def test_question_states_the_answer_format_and_scoring_is_f1():
    instance = OolongPairsTask().generate(2048, 1, seed=0)[0]
    assert "(id1, id2)" in instance.question
    assert instance.gold, "kind 1 has qualifying pairs in this window"
    exact = "\n".join(f"({a}, {b})" for a, b in instance.gold)
    assert OolongPairsTask().score(exact, instance) == 1.0
    half = "\n".join(f"({b}, {a})" for a, b in instance.gold[: len(instance.gold) // 2])
    expected = 2 * 1.0 * 0.5 / 1.5 if len(instance.gold) % 2 == 0 else None
    if expected is not None:
        assert abs(OolongPairsTask().score(half, instance) - expected) < 1e-9
