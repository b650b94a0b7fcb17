"""OOLONG-Pairs against the RLM paper (arXiv 2512.24601v1): Appendix E.1's queries, B.2's output format."""

import json
import re
from collections import defaultdict
from datetime import datetime
from itertools import combinations
from pathlib import Path

import rlm_adapters.evals
from rlm_adapters.evals.tasks.oolong_pairs import QUERIES, OolongPairsTask

DATA = Path(rlm_adapters.evals.__file__).parent / "data" / "trec_coarse_validated.jsonl"
LINE = re.compile(r"^Date: (\w{3} \d{2}, \d{4}) \|\| User: (\d+) \|\| Instance: (.+)$")
# Task 1 as the appendix prints it, then the format sentences of the trajectory in Appendix B.2.
TASK_1 = (
    "In the above data, list all pairs of user IDs (no duplicate pairs, list lower ID first) where both users have "
    "at least one instance with a numeric value or location. Each of the questions can be labelled as one of the "
    "labels (the data does not provide the labels, you need to figure out the label from the semantics of the "
    "question): description and abstract concept, entity, human being, numeric value, location, abbreviation. In "
    "your answer, list all pairs in the format (user_id_1, user_id_2), separated by newlines. Your answer must be "
    "sorted by first user ID. For example, if the answer is the Instance ID pairs (22740, 35839) and (35839, 52032), "
    "you should return `(22740, 35839), (35839, 52032)`. If there is no answer, return an empty list []."
)


def parse(context):
    labels = {row["input"]: row["label"] for row in map(json.loads, DATA.read_text().splitlines())}
    users = defaultdict(list)
    for line in context.splitlines():
        match = LINE.match(line)
        if match:
            day, user, text = match.groups()
            users[int(user)].append((labels[text], datetime.strptime(day, "%b %d, %Y").date()))
    return users


def brute_force(users, number):
    """The appendix's conditions, written again from its wording, over (label, date) lists."""

    def n(u, label):
        return sum(lab == label for lab, _ in users[u])

    def dates(u, label):
        return [d for lab, d in users[u] if lab == label]

    one = {
        1: lambda u: n(u, "numeric value") + n(u, "location") > 0,
        4: lambda u: (
            (n(u, "human being") + n(u, "location") > 0)
            and all(d > datetime(2023, 1, 6).date() for d in dates(u, "human being"))
        ),
        10: lambda u: (
            (n(u, "numeric value") + n(u, "abbreviation") > 0)
            and all(d < datetime(2023, 5, 20).date() for d in dates(u, "abbreviation"))
        ),
    }
    two = {
        11: (lambda u: n(u, "entity") >= 1 and n(u, "abbreviation") >= 1, lambda u: n(u, "entity") == 1),
        14: (lambda u: n(u, "human being") >= 1 and n(u, "numeric value") >= 1, lambda u: n(u, "location") == 2),
        19: (
            lambda u: n(u, "location") >= 2 and n(u, "entity") >= 1,
            lambda u: n(u, "description and abstract concept") == 1 and n(u, "abbreviation") == 1,
        ),
    }
    pairs = []
    for a, b in combinations(sorted(users), 2):
        if number in one:
            ok = one[number](a) and one[number](b)
        else:
            first, second = two[number]
            ok = (first(a) and second(b)) or (first(b) and second(a))
        if ok:
            pairs.append([a, b])
    return pairs


def test_twenty_queries_in_the_papers_words():
    assert len(QUERIES) == 20
    assert QUERIES[0].text() == TASK_1
    assert sum(q.second is None for q in QUERIES) == 10  # tasks 1-10 ask both users; 11-20 one and the other
    dated = [q.clause for q in QUERIES if "2023" in q.clause]
    assert [re.search(r"(after|before) (\w+ \d+, 2023)", c).groups() for c in dated] == [
        ("after", "January 6, 2023"),
        ("before", "March 15, 2023"),
        ("after", "February 1, 2023"),
        ("after", "April 10, 2023"),
        ("before", "May 20, 2023"),
    ]


def test_twenty_queries_over_one_32k_oolong_window():
    instances = OolongPairsTask().generate(32_768, 20, seed=0)
    assert [x.kind for x in instances] == [f"task_{i:02d}" for i in range(1, 21)]
    assert len({x.context for x in instances}) == 1 and instances[0].metadata["lines"] == 787
    assert instances[0].context.startswith("The following lines contain 787 general-knowledge questions")
    assert "Recall: the preceding lines contain 787" in instances[0].context
    assert all(x.question == q.text() for x, q in zip(instances, QUERIES, strict=True))
    assert instances[0].layout == "system"
    # At the paper's 32K every query has pairs to find (the long-output task the paper describes).
    assert all(x.gold for x in instances) and max(len(x.gold) for x in instances) > 1000


def test_gold_pairs_match_the_appendix_conditions_recomputed_from_the_text():
    instances = OolongPairsTask().generate(8192, 20, seed=4)
    users = parse(instances[0].context)
    assert sum(len(v) for v in users.values()) == instances[0].metadata["lines"]
    for number in (1, 4, 10, 11, 14, 19):
        assert instances[number - 1].gold == brute_force(users, number), number


def test_score_is_f1_over_pairs_in_the_papers_format():
    task = OolongPairsTask()
    instance = task.generate(8192, 1, seed=4)[0]
    gold = instance.gold
    assert len(gold) >= 4
    exact = "\n".join(f"({a}, {b})" for a, b in gold)
    assert task.score(exact, instance) == 1.0
    half = "\n".join(f"({a}, {b})" for a, b in gold[: len(gold) // 2])
    recall = (len(gold) // 2) / len(gold)
    assert abs(task.score(half, instance) - 2 * recall / (1 + recall)) < 1e-9
    self_pair = exact + f"\n({gold[0][0]}, {gold[0][0]})"
    assert task.score(self_pair, instance) < 1.0  # a self-pair is a wrong prediction
