"""OOLONG windows and questions against the figures of oolong-synth's generator.

Figures come from abertsch72/oolong ``src/data_gen/oolong-synth`` at 78c4d1021af250c1bacaacf030465f81a896e32b
(``datasets_loader.py``: PROMPT_TOKENS 168, QUESTION_TOKENS 250, PER_EXAMPLE_TOKENS 39, the description
text; ``utils.py``: dates Feb 16, 2022 .. Jun 21, 2025, 10% common user IDs taking 80% of lines;
``example_constructor.py``: label counts; ``task_constructors.py``: question wording and the 2% margin;
``subsample.py``: 25 questions per window).
"""

import hashlib
import json
import math
import random
import re
from collections import Counter
from datetime import date, datetime

import numpy
import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks.oolong import OolongTask
from rlm_adapters.evals.tasks.oolong_questions import counting_questions, user_questions, window_questions
from rlm_adapters.evals.tasks.oolong_window import (
    TREC_LABELS,
    Row,
    build_window,
    examples_in_context,
    label_counts,
    load_pool,
)

LINE = re.compile(r"^Date: (\w{3} \d{2}, \d{4}) \|\| User: (\d{5}) \|\| Instance: (.+)$")


@pytest.fixture(scope="module")
def window_131k():
    return build_window(random.Random("fixture"), 131_072)


@pytest.mark.parametrize(("length", "lines"), [(1024, 14), (8192, 188), (32_768, 787), (131_072, 3182)])
def test_line_count_is_the_originals_formula(length, lines):
    assert examples_in_context(length) == lines == int((0.95 * length - 168 - 250) // 39)
    assert len(build_window(random.Random(1), length).rows) == lines


def test_too_small_a_window_is_refused():
    with pytest.raises(ConfigurationError, match="440"):
        build_window(random.Random(0), 440)


def test_text_has_the_originals_intro_lines_and_recall_trailer(window_131k):
    text = window_131k.text()
    labels = ", ".join(f"'{label}'" for label in window_131k.counts)
    description = (
        " lines contain 3182 general-knowledge questions, one per line. Each question has an answer that can be "
        f"described as one of 6 categories: {labels}.\n\nYou will be asked to answer questions about the aggregate "
        "label statistics across all 3182 examples in this dataset. Do not try to guess, estimate, or approximate "
        "the result. Calculate the exact answer given these datapoints.\n\n"
    )
    assert text.startswith("The following" + description)
    assert text.endswith("Recall: the preceding" + description)
    body = text[len("The following" + description) : -len("Recall: the preceding" + description)].splitlines()
    assert len(body) == 3182 and all(LINE.match(line) for line in body)
    assert not any(label in line.split("Instance:")[0] for line in body for label in TREC_LABELS)


def test_dates_span_the_originals_forty_one_months(window_131k):
    days = [row.day for row in window_131k.rows]
    assert min(days) >= date(2022, 2, 16) and max(days) <= date(2025, 6, 21)
    months = {(d.year, d.month) for d in days}
    assert len(months) == 41  # Feb 2022 .. Jun 2025, every month drawn at this size
    shown = [
        datetime.strptime(LINE.match(line).group(1), "%b %d, %Y").date()
        for line in window_131k.text().splitlines()
        if LINE.match(line)
    ]
    assert Counter(shown) == Counter(days)


def test_ten_percent_of_user_ids_take_about_eighty_percent_of_lines(window_131k):
    users = Counter(row.user for row in window_131k.rows)
    repeated = {user for user, count in users.items() if count > 1}
    # The 318 common IDs (10% of 3,182) each appear about 8 times; the rest are nearly all one-offs.
    assert 300 <= len(repeated) <= 330
    share = sum(users[user] for user in repeated) / len(window_131k.rows)
    assert 0.77 <= share <= 0.83
    assert all(10_000 <= user <= 99_999 for user in users)


class FixedRandom(random.Random):
    def __init__(self, draws):
        super().__init__(0)
        self.draws = list(draws)

    def randint(self, a, b):
        return self.draws.pop(0)


def test_label_counts_are_the_softmax_of_the_originals_draws():
    draws = [1, 30, 4, 9, 16, 25]
    counts = label_counts(FixedRandom(draws), list(TREC_LABELS), 787, temperature=2)
    exps = [math.exp(math.sqrt(d)) for d in draws]
    expected = [round(787 * e / sum(exps)) for e in exps]
    expected[0] -= sum(expected) - 787
    assert counts == expected and sum(counts) == 787
    # A sharp skew at T=2: a draw of 30 against a draw of 1 is e^4.48, about 88 times as many lines.
    assert counts[1] > 50 * counts[0] and counts[1] > 1.5 * counts[5]


def test_labels_are_sampled_without_replacement_while_the_pool_lasts(window_131k):
    pool = load_pool()
    for label, count in window_131k.counts.items():
        texts = Counter(row.text for row in window_131k.rows if row.label == label)
        assert sum(texts.values()) == count
        if count <= len(pool[label]):
            assert max(texts.values(), default=1) == 1
        assert set(texts) <= set(pool[label])


def test_lines_are_shown_sorted_then_permuted_as_datasets_shuffle_seed_42(window_131k):
    ordered = sorted(window_131k.rows, key=lambda row: row.text)
    permutation = numpy.random.default_rng(42).permutation(len(ordered))
    assert list(window_131k.shown) == [ordered[i] for i in permutation]


def test_margin_filter_and_wording_of_counting_questions():
    questions = counting_questions({"entity": 100, "location": 99, "abbreviation": 50, "human being": 50})
    tasks = [(q.task, q.answer) for q in questions]
    # entity leads location by 1/299 of a share: no most-common question (the original wants > 2 points).
    assert ("TASK_TYPE.MOST_FREQ", "['entity']") not in tasks
    assert questions[0].question == (
        "In the above data, which of the labels is the least common? Give your final answer in the form 'Label: "
        "answer' where answer is one of the labels: entity, location, abbreviation, human being."
    )
    assert questions[0].answer == "['abbreviation', 'human being']"  # ties are kept; the scorer takes the first
    comparisons = [q for q in questions if q.task == "TASK_TYPE.RELATIVE_FREQ"]
    # entity/location differ by under 2 points: skipped; abbreviation/human being are equal: asked.
    assert len(comparisons) == 5
    assert comparisons[-1].answer == "['same frequency as']"
    assert comparisons[0].question == (
        "In the above data, is label 'entity' more common, less common, or the same frequency as label "
        "'abbreviation'? Give your final answer in the form 'Answer: entity is [X] abbreviation', where [X] is "
        "'more common than', 'less common than', or 'same frequency as'."
    )
    counts = [q for q in questions if q.answer_type == "ANSWER_TYPE.NUMERIC"]
    assert [q.answer for q in counts] == ["[100]", "[99]", "[50]", "[50]"]
    assert counts[0].question == (
        "In the above data, how many data points should be classified as label 'entity'? Give your final answer in "
        "the form 'Answer: number'."
    )
    top = counting_questions({"entity": 100, "location": 10, "abbreviation": 0})[0]
    assert (top.task, top.answer) == ("TASK_TYPE.MOST_FREQ", "['entity']")
    assert top.question.endswith("one of the labels: entity, location, abbreviation.")


def test_user_questions_follow_the_originals_order_and_one_user_subset():
    day = date(2023, 1, 1)
    rows = tuple(
        Row(day, user, f"q{i}", label)
        for i, (user, label) in enumerate(
            [(11111, "entity")] * 5 + [(22222, "location")] * 3 + [(33333, "entity")] * 1 + [(44444, "location")]
        )
    )
    questions = user_questions(rows, random.Random(0))
    assert questions[0].question == (
        "In the above data, which user is represented most often? Give your final answer in the form 'User: [X]', "
        "where [X] is the user ID."
    )
    assert [q.answer for q in questions[:2]] == ["[11111]", "[22222]"]
    subset = [q for q in questions if q.input_subset]
    ids = {re.search(r"user IDs (\d+)\.", q.question).group(1) for q in subset}
    assert len(ids) == 1  # the original's min(1, ...) picks a single user
    assert all(q.task_group == "user" for q in questions)


def test_each_window_gives_its_first_25_questions_counting_first(window_131k):
    questions = window_questions(window_131k.rows, window_131k.counts, random.Random(0))
    assert len(questions) == 25
    groups = [q.task_group for q in questions]
    assert groups == sorted(groups)  # "counting" then "user"
    instances = OolongTask().generate(131_072, 50, seed=0)
    assert len(instances) == 50 and [x.metadata["window"] for x in instances] == [0] * 25 + [1] * 25
    assert len({x.context for x in instances}) == 2
    assert all(x.layout == "system" for x in instances)


def test_gold_answers_agree_with_a_recount_from_the_text():
    pool = {text: label for label, texts in load_pool().items() for text in texts}
    instances = OolongTask().generate(8192, 25, seed=3)
    lines = [LINE.match(line) for line in instances[0].context.splitlines()]
    labels = Counter(pool[m.group(3)] for m in lines if m)
    for instance in instances:
        question, gold = instance.question, json.loads(instance.gold.replace("'", '"'))
        if question.startswith("In the above data, how many data points"):
            assert gold == [labels[re.search(r"label '([^']+)'", question).group(1)]]
        if question.startswith("In the above data, which user is represented most often"):
            users = Counter(int(m.group(2)) for m in lines if m)
            assert gold == [users.most_common(1)[0][0]]


def test_same_seed_same_instances():
    first = OolongTask().generate(4096, 30, seed=5)
    assert [x.digest() for x in first] == [x.digest() for x in OolongTask().generate(4096, 30, seed=5)]
    assert first[0].context != OolongTask().generate(4096, 1, seed=6)[0].context


def test_exported_rows_are_scored_unchanged(tmp_path):
    rows = [
        {
            "id": 17000201,
            "context_window_id": 3,
            "context_len": 1024,
            "dataset": "trec_coarse",
            "context_window_text": "The following lines ...",
            "question": "In the above data, which of the labels is the most common? ...",
            "answer": "['entity']",
            "answer_type": "ANSWER_TYPE.LABEL",
            "task_group": "counting",
            "task": "TASK_TYPE.MOST_FREQ",
        },
        {**dict.fromkeys(("context_window_text", "question", "answer_type"), "x"), "answer": "[1]"}
        | {"context_len": 1024, "dataset": "spam"},
    ]
    (tmp_path / "validation.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    task = OolongTask(data_dir=tmp_path)
    [instance] = task.generate(1024, 10, seed=0)
    assert (instance.context, instance.gold, instance.kind) == (
        "The following lines ...",
        "['entity']",
        "counting:MOST_FREQ",
    )
    assert instance.id == "oolong-1024-row17000201"
    assert task.score("Label: entity", instance) == 1.0 and task.score("Label: Entity", instance) == 0.0
    with pytest.raises(ConfigurationError, match=r"at length 2048; the rows have lengths \[1024\]"):
        task.generate(2048, 1, seed=0)
    (tmp_path / "bad.jsonl").write_text('{"dataset": "trec_coarse"}\n')
    with pytest.raises(ConfigurationError, match="lacks context_window_text"):
        OolongTask(data_dir=tmp_path)


# Produced by running oolong-synth's own ``CountingTasks(counts)`` and ``UserTasks(counts, in_context)`` (the
# stored copy of ``task_constructors.py`` read for this harness, constants stubbed) over each window below, with
# ``random.seed(7)`` before ``UserTasks``: the number of questions, the sha256 of the JSON list of
# [question, str(answer), group, task, answer_type, input_subset], and the last question's gold.
ORIGINAL_QUESTIONS = {
    2048: (55, "480431d31bbdacf2632c8d59d06c562f2f648f9ea93804d65d4f046339882164", "[27654]"),
    32768: (44, "f48f9e092e70f7e75d4bb75e8ec9a18a096f7cc7fa52e247731a880cd84c48ef", "[51649]"),
}


@pytest.mark.parametrize("length", sorted(ORIGINAL_QUESTIONS))
def test_questions_are_the_original_constructors_output(length):
    window = build_window(random.Random(f"original-{length}"), length)
    ours = counting_questions(window.counts) + user_questions(window.rows, random.Random(7))
    rows = [[q.question, q.answer, q.task_group, q.task, q.answer_type, q.input_subset] for q in ours]
    count, digest, last = ORIGINAL_QUESTIONS[length]
    assert (len(rows), rows[-1][1]) == (count, last)
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == digest
