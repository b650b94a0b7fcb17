"""OOLONG's questions over a window, in the order and with the wording of oolong-synth's task constructors.

``task_constructors.py`` of oolong-synth builds, per window, counting questions (``CountingTasks``), then
user questions (``UserTasks``), then timeline questions; the published split keeps the first 25 of each
window (``subsample.py``), which the counting and user groups always fill, so the timeline group is not
built here. Reproduced decisions, including the odd ones:

- most common label: asked only when the top label is unique and more than 2 points (of share) ahead of
  every other label; least common: always asked, the gold being the first of the tied labels;
- label comparisons: every pair in the window's label order whose shares differ by more than 2 points,
  or are exactly equal; counts: one question per label, zero counts included;
- label lists in the question name the labels in the window's order, unquoted;
- user questions: the most and second most represented user (when unique); a "subset of users" that has
  exactly one user (the original's ``min(1, ...)``), whose counting questions follow; then, per label,
  the user with the most instances of it and a two-user comparison drawn from that label's top ten.

Gold answers are stored as the original stores them (``str`` of a one-element list, e.g. ``"['entity']"``)
so that the same scorer serves generated windows and exported rows.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from rlm_adapters.evals.tasks.oolong_window import Row

MARGIN = 0.02
PER_WINDOW = 25
ABOVE = "In the above data,"


@dataclass(frozen=True)
class Question:
    """One oolong-synth question, with the row fields the original stores."""

    question: str
    answer: str
    task_group: str
    task: str
    answer_type: str
    input_subset: bool = False


def _closest(counts: dict[str, int], key: str, total: int) -> float:
    share = counts[key] / total
    return min((abs(share - counts[other] / total) for other in counts if other != key), default=1.0)


def counting_questions(counts: dict[str, int], group: str = "counting") -> list[Question]:
    """``CountingTasks``: most / least common label, comparisons, and one count per label."""
    labels = ", ".join(counts)
    total = sum(counts.values())
    out: list[Question] = []
    top = max(counts.values())
    tops = [k for k in counts if counts[k] == top]
    if len(tops) == 1 and _closest(counts, tops[0], total) > MARGIN:
        out.append(
            Question(
                f"{ABOVE} which of the labels is the most common? Give your final answer in the form 'Label: "
                f"answer' where answer is one of the labels: {labels}.",
                str(tops),
                group,
                "TASK_TYPE.MOST_FREQ",
                "ANSWER_TYPE.LABEL",
            )
        )
    low = min(counts.values())
    out.append(
        Question(
            f"{ABOVE} which of the labels is the least common? Give your final answer in the form 'Label: "
            f"answer' where answer is one of the labels: {labels}.",
            str([k for k in counts if counts[k] == low]),
            group,
            "TASK_TYPE.LEAST_FREQ",
            "ANSWER_TYPE.LABEL",
        )
    )
    for a, b in itertools.combinations(list(counts), 2):
        diff = counts[a] / total - counts[b] / total
        if abs(diff) > MARGIN or diff == 0:
            word = (
                "more common than"
                if counts[a] > counts[b]
                else "less common than"
                if counts[a] < counts[b]
                else "same frequency as"
            )
            out.append(
                Question(
                    f"{ABOVE} is label '{a}' more common, less common, or the same frequency as label '{b}'? Give "
                    f"your final answer in the form 'Answer: {a} is [X] {b}', where [X] is 'more common than', "
                    "'less common than', or 'same frequency as'.",
                    str([word]),
                    group,
                    "TASK_TYPE.RELATIVE_FREQ",
                    "ANSWER_TYPE.COMPARISON",
                )
            )
    for label in counts:
        out.append(
            Question(
                f"{ABOVE} how many data points should be classified as label '{label}'? Give your final answer in "
                "the form 'Answer: number'.",
                str([counts[label]]),
                group,
                "TASK_TYPE.NUMERIC_ONE_CLASS",
                "ANSWER_TYPE.NUMERIC",
            )
        )
    return out


def _ranked(values: list[int]) -> list[tuple[int, int]]:
    # sorted() is stable: ties keep first-occurrence order, as the original's Counter does.
    return sorted(Counter(values).items(), key=lambda item: item[1], reverse=True)


def _user_question(question: str, user: int, task: str, subset: bool = False) -> Question:
    return Question(question, str([user]), "user", task, "ANSWER_TYPE.USER", subset)


def user_questions(rows: tuple[Row, ...], rng: random.Random) -> list[Question]:
    """``UserTasks`` over the rows in generation order."""
    form = "Give your final answer in the form 'User: [X]', where [X] is the user ID."
    users = [row.user for row in rows]
    limit = min(50, len(set(users)))
    top = _ranked(users)[:limit]
    out: list[Question] = []
    if len(top) > 1 and top[0][1] > top[1][1]:
        out.append(
            _user_question(f"{ABOVE} which user is represented most often? {form}", top[0][0], "TASK_TYPE.MOST_FREQ")
        )
        if len(top) == 2 or top[1][1] > top[2][1]:
            out.append(
                _user_question(
                    f"{ABOVE} which user is represented the second most often? {form}",
                    top[1][0],
                    "TASK_TYPE.SECOND_MOST_FREQ",
                )
            )
    # The original samples min(1, ...) users: the "subset" always has one user (or none for tiny windows).
    subset = rng.sample(top, min(1, min(rng.randint(0, 10) + 10, int(limit * 0.8))))
    ids = [str(user) for user, _ in subset]
    names = ", ".join(ids)
    picked = [(row.user, row.label) for row in rows if str(row.user) in ids]
    sub_top = _ranked([user for user, _ in picked])[:limit]
    prefix = f"For the following question, only consider the subset of users with IDs {names}. Among these users,"
    if len(sub_top) > 1 and sub_top[0][1] > sub_top[1][1]:
        out.append(
            _user_question(
                f"{prefix} which user is represented most often? {form}", sub_top[0][0], "TASK_TYPE.MOST_FREQ", True
            )
        )
        if len(sub_top) > 2 and sub_top[1][1] > sub_top[2][1]:
            out.append(
                _user_question(
                    f"{prefix} which user is represented the second most often? {form}",
                    sub_top[1][0],
                    "TASK_TYPE.SECOND_MOST_FREQ",
                    True,
                )
            )
    sub_counts = dict(Counter(label for _, label in picked))
    if not sub_counts:
        return out
    subset_prefix = (
        f"For the following question, only consider the subset of instances that are associated with user IDs "
        f"{names}. Among instances associated with these users,"
    )
    for item in counting_questions(sub_counts, group="user"):
        out.append(replace(item, question=item.question.replace(ABOVE, subset_prefix), input_subset=True))
    by_label: dict[str, list[int]] = defaultdict(list)
    for user, label in picked:
        by_label[label].append(user)
    for label, label_users in by_label.items():
        ranked = _ranked(label_users)[:10]
        if len(ranked) > 1 and ranked[0][1] > ranked[1][1]:
            out.append(
                _user_question(
                    f"{prefix} which user has the most instances with the label {label}? {form}",
                    ranked[0][0],
                    "TASK_TYPE.MOST_FREQ",
                    True,
                )
            )
    by_label = defaultdict(list)
    for row in rows:
        by_label[row.label].append(row.user)
    for label, label_users in by_label.items():
        ranked = _ranked(label_users)[:10]
        if len(ranked) > 1 and ranked[0][1] > ranked[1][1]:
            out.append(
                _user_question(
                    f"{ABOVE} which user has the most instances with the label {label}? {form}",
                    ranked[0][0],
                    "TASK_TYPE.MOST_FREQ",
                )
            )
        middle, end = 5, 9
        if end >= len(ranked):
            end = len(ranked) - 1
            middle = end // 2
        for _ in range(10):
            first, second = ranked[rng.randint(0, middle)], ranked[rng.randint(middle, end)]
            if first[1] > second[1] + 1:
                out.append(
                    _user_question(
                        f"{ABOVE} which user has more instances with the label {label}: User {first[0]} or User "
                        f"{second[0]}? {form}",
                        first[0],
                        "TASK_TYPE.RELATIVE_FREQ",
                    )
                )
                break
    return out


def window_questions(rows: tuple[Row, ...], counts: dict[str, int], rng: random.Random) -> list[Question]:
    """The first 25 questions of a window, as the published split keeps them."""
    questions = counting_questions(counts)
    if len(questions) < PER_WINDOW:
        questions += user_questions(rows, rng)
    return questions[:PER_WINDOW]
