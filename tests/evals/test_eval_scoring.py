import math

import pytest

from rlm_adapters.evals.scoring import (
    choice_score,
    extract_choice,
    mean_ci,
    mean_std,
    oolong_candidate,
    oolong_score,
    pairs_f1,
    parse_pairs,
    sniah_score,
)


@pytest.mark.parametrize(
    ("answer", "golds", "score"),
    [
        ("The special magic number is 1234567.", ["1234567"], 1.0),
        ("**1234567**", ["1234567"], 1.0),
        ("[1234567] (I am sure)", ["1234567"], 1.0),
        ("123456", ["1234567"], 0.0),
        ("1234567 and 7654321", ["1234567", "7654321"], 1.0),
        ("only 1234567", ["1234567", "7654321"], 0.5),
        ("KEY-Abc", ["key-abc"], 1.0),
    ],
)
def test_sniah_string_match_all(answer, golds, score):
    assert sniah_score(answer, golds) == score


@pytest.mark.parametrize(
    ("answer", "candidate"),
    [
        ("Label: **location**", "location"),
        ("Answer: [12]", "12"),
        ("The answer is\nLabel: entity ", "entity"),
        ("Answer: numeric value is more common than location", "more common"),
        ("entity", "entity"),
        ("I think after long analysis the result is location", "location"),
    ],
)
def test_oolong_candidate_takes_text_after_last_colon(answer, candidate):
    assert oolong_candidate(answer) == candidate


@pytest.mark.parametrize(
    ("answer", "gold", "kind", "score"),
    [
        ("Label: location", "location", "label", 1.0),
        ("Label: **Location**.", "location", "label", 1.0),
        ("Label: [human being]", "human being", "label", 1.0),
        ("Label: entity", "location", "label", 0.0),
        ("Answer: 12", 12, "number", 1.0),
        ("Answer: 10", 12, "number", 0.5625),
        ("Answer: **15** (counted by hand)", 12, "number", 0.421875),
        ("Answer: many", 12, "number", 0.0),
        ("Answer: 1,204", 1204, "number", 1.0),
        ("Answer: entity is more common than location", "more common than", "comparison", 1.0),
        ("Answer: entity is less common than location", "more common than", "comparison", 0.0),
        ("Answer: entity is [same frequency as] location", "same frequency as", "comparison", 1.0),
        ("User: 48213", 48213, "user", 1.0),
        ("User: **48214**", 48213, "user", 0.0),
        ("Date: March 2023", "2023-03", "date", 1.0),
        ("Date: Mar 2023", "2023-03", "date", 1.0),
        ("Date: 2023-03", "2023-03", "date", 1.0),
        ("Date: April 2023", "2023-03", "date", 0.0),
        ("Date: sometime", "2023-03", "date", 0.0),
    ],
)
def test_oolong_score_hand_computed(answer, gold, kind, score):
    assert oolong_score(answer, gold, kind) == pytest.approx(score)


def test_pairs_parse_and_f1():
    assert parse_pairs("(3, 1)\n(1,3) (2 , 5), (4, 4)") == {(1, 3), (2, 5)}
    gold = [[1, 3], [2, 5], [6, 7], [8, 9]]
    assert pairs_f1("(1, 3) (5, 2)", gold) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert pairs_f1("(1, 3) (10, 11)", gold) == pytest.approx(2 * 0.5 * 0.25 / 0.75)
    assert pairs_f1("None", []) == 1.0
    assert pairs_f1("(1, 2)", []) == 0.0
    assert pairs_f1("None", gold) == 0.0


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        ("The correct answer is (B)", "B"),
        ("**The correct answer is (C)**", "C"),
        ("The correct answer is D.", "D"),
        ("B", "B"),
        ("(A)", "A"),
        ("**C**", "C"),
        ("Answer: D", "D"),
        ("[B]", "B"),
        ("I would say B because it scales", None),
        ("The correct answer is (E)", None),
    ],
)
def test_extract_choice(answer, letter):
    assert extract_choice(answer) == letter


def test_choice_score():
    assert choice_score("The correct answer is (A)", "A") == 1.0
    assert choice_score("The correct answer is (A)", "B") == 0.0


def test_mean_ci_and_std_by_hand():
    mean, low, high = mean_ci([0.5, 0.7, 0.6, 0.6])
    half = 1.96 * math.sqrt(0.02 / 3) / 2
    assert (mean, low, high) == pytest.approx((0.6, 0.6 - half, 0.6 + half))
    assert mean_ci([1.0, 0.0, 1.0, 0.0]) == pytest.approx((0.5, 0.0, 1.0))  # clipped both ways
    assert mean_ci([1.0]) == (1.0, 1.0, 1.0)
    assert mean_ci([1.0, 1.0, 0.9])[2] == 1.0  # clipped
    assert mean_std([2.0, 4.0]) == pytest.approx((3.0, math.sqrt(2)))
    assert all(math.isnan(x) for x in mean_ci([]))
