import functools
import hashlib
import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

import rlm_adapters.evals
from rlm_adapters.evals.tasks.oolong_legacy import LABELS
from rlm_adapters.evals.tasks.oolong_legacy import LegacyOolongTask as OolongTask
from rlm_adapters.evals.tokens import count_tokens

DATA = Path(rlm_adapters.evals.__file__).parent / "data"
LINE = re.compile(r"^Date: (\w{3} \d{2}, \d{4}) \|\| User: (\d+) \|\| Instance: (.+)$")


@functools.cache
def pool_labels() -> dict[str, str]:
    # Read straight from the shipped file, not through the generator's loader.
    rows = [json.loads(line) for line in (DATA / "trec_coarse_validated.jsonl").read_text().splitlines()]
    return {row["input"]: row["label"] for row in rows}


def parse(context: str) -> list[tuple[datetime, int, str]]:
    labels = pool_labels()
    rows = []
    for line in context.splitlines():
        match = LINE.match(line)
        if match:
            day, user, text = match.groups()
            rows.append((datetime.strptime(day, "%b %d, %Y"), int(user), labels[text]))
    return rows


def recount(question: str, rows: list[tuple[datetime, int, str]]) -> object:
    """An independent gold answer from the question text and the parsed lines."""
    quoted = re.findall(r"label '([^']+)'", question)
    labels = Counter({label: 0 for label in LABELS}) + Counter(label for _, _, label in rows)
    labels.update({label: 0 for label in LABELS})
    if "most common? Give" in question and "Considering" not in question:
        return labels.most_common(1)[0][0]
    if "least common?" in question:
        return min(labels.items(), key=lambda item: item[1])[0]
    if "more common, less common" in question:
        a, b = labels[quoted[0]], labels[quoted[1]]
        return "more common than" if a > b else "less common than" if a < b else "same frequency as"
    if "which user ID has the most" in question:
        return Counter(user for _, user, _ in rows).most_common(1)[0][0]
    if "instances of user" in question:
        user = int(re.search(r"instances of user (\d+)", question).group(1))
        return Counter(label for _, u, label in rows if u == user).most_common(1)[0][0]
    if "dated in" in question:
        month = datetime.strptime(re.search(r"dated in (\w+ \d{4})", question).group(1), "%B %Y")
        return sum(label == quoted[0] and (d.year, d.month) == (month.year, month.month) for d, _, label in rows)
    if "how many data points" in question:
        return labels[quoted[0]]
    months = Counter(d.strftime("%Y-%m") for d, _, label in rows if label == quoted[0])
    return months.most_common(1)[0][0]


def test_shipped_pool_is_the_validated_file_with_its_licence():
    digest = hashlib.sha256((DATA / "trec_coarse_validated.jsonl").read_bytes()).hexdigest()
    assert digest == "84bcac41e631eb8d6666b04646977d6e4be5c444a5b939905cf589deb4d13dcc"
    assert "Amanda Bertsch" in (DATA / "LICENSE").read_text()


def test_same_seed_gives_byte_identical_instances():
    first, second = OolongTask().generate(2048, 3, seed=5), OolongTask().generate(2048, 3, seed=5)
    assert [x.digest() for x in first] == [x.digest() for x in second]
    assert [x.context for x in OolongTask().generate(2048, 3, seed=6)] != [x.context for x in first]


@pytest.mark.parametrize("length", [2048, 4096, 8192])
def test_context_length_within_two_percent(length):
    for instance in OolongTask().generate(length, 2, seed=1):
        assert abs(count_tokens(instance.context) - length) <= 0.02 * length


def test_gold_answers_match_an_independent_recount():
    instances = OolongTask().generate(4096, 16, seed=11)
    assert len({x.kind for x in instances}) >= 7
    for instance in instances:
        rows = parse(instance.context)
        assert len(rows) == instance.metadata["lines"]
        assert f"contain {len(rows)} general-knowledge questions" in instance.context
        assert recount(instance.question, rows) == instance.gold, instance.question


def test_lines_hide_labels_and_users_are_heavy_tailed():
    instance = OolongTask().generate(8192, 1, seed=2)[0]
    body = instance.context.split("\n\n", 1)[1]
    assert all(LINE.match(line) for line in body.splitlines())
    assert not any(label in line.split("Instance:")[0] for line in body.splitlines() for label in LABELS)
    users = sorted(Counter(user for _, user, _ in parse(instance.context)).values(), reverse=True)
    assert users[0] >= 4 * users[len(users) // 2]


def test_label_mix_is_skewed():
    shares = []
    for instance in OolongTask().generate(4096, 4, seed=3):
        counts = Counter(label for _, _, label in parse(instance.context))
        shares.append(max(counts.values()) / sum(counts.values()))
    assert max(shares) > 0.4  # uniform would be 1/6
