"""The paper scorers against decisions of the ORIGINAL scorers.

Every expected score below was produced by running the original function itself (in a scratch folder outside
this repository, none of its code committed) on the listed reply:
- OOLONG: ``synth_process_response`` of abertsch72/oolong ``src/eval/eval_helpers.py`` at commit
  adbf1cb56a0b0c7885649ac12589f7d6e215c841 (python-dateutil 2.9.0), run on 2026-11-30 (its incomplete-date
  results depend on the day it runs: see `scorers`).
- LongBench v2: ``extract_answer`` of THUDM/LongBench ``pred.py`` at 2e00731f8d0bff23dc4325161044d0ed8af94c1e,
  applied to ``output.strip()`` and compared with the gold letter, as ``get_pred`` does.
- RULER: ``string_match_all`` of NVIDIA/RULER ``scripts/eval/synthetic/constants.py`` at
  c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a, for one prediction, divided by 100.
- OOLONG-Pairs: the RLM paper (arXiv 2512.24601v1) publishes no scorer, only "F1 scores over the answer" and the
  answer format; those expected values are computed by hand from that definition, not from an original.
"""

import pytest

from rlm_adapters.evals.scorers import (
    longbench_extract_answer,
    longbench_score,
    oolong_candidate,
    oolong_synth_score,
    pairs_f1,
    parse_pairs,
    ruler_string_match_all,
)

# (reply, the row's answer field, answer_type, the original's score)
OOLONG = [
    ("Label: entity", "['entity']", "ANSWER_TYPE.LABEL", 1.0),
    ("Label: **entity**.", "['entity']", "ANSWER_TYPE.LABEL", 0.0),
    ("Label: **entity**", "['entity']", "ANSWER_TYPE.LABEL", 1.0),
    ("The most common label is entity.", "['entity']", "ANSWER_TYPE.LABEL", 0.0),
    ("entity", "['entity']", "ANSWER_TYPE.LABEL", 1.0),
    ("Entity", "['entity']", "ANSWER_TYPE.LABEL", 0.0),
    ("Label: [entity]", "['entity']", "ANSWER_TYPE.LABEL", 1.0),
    ("Label: 'entity'", "['entity']", "ANSWER_TYPE.LABEL", 0.0),
    ("Label: description and abstract concept", "['description and abstract concept']", "ANSWER_TYPE.LABEL", 1.0),
    ("After counting every line I am confident the answer is entity", "['entity']", "ANSWER_TYPE.LABEL", 1.0),
    ("Answer: human being is more common than location", "['more common than']", "ANSWER_TYPE.COMPARISON", 1.0),
    ("Answer: more common than", "['more common than']", "ANSWER_TYPE.COMPARISON", 1.0),
    ("Answer: MORE COMMON THAN", "['more common than']", "ANSWER_TYPE.COMPARISON", 0.0),
    ("Answer: entity is less common than location", "['more common than']", "ANSWER_TYPE.COMPARISON", 0.0),
    ("Answer: abbreviation is same frequency as entity", "['same frequency as']", "ANSWER_TYPE.COMPARISON", 1.0),
    ("Answer: more common", "['more common than']", "ANSWER_TYPE.COMPARISON", 1.0),
    ("Answer: 28", "[28]", "ANSWER_TYPE.NUMERIC", 1.0),
    ("Answer: 30", "[28]", "ANSWER_TYPE.NUMERIC", 0.5625),
    ("Answer: 1,028", "[1028]", "ANSWER_TYPE.NUMERIC", 0.0),
    ("Answer: 28 entities", "[28]", "ANSWER_TYPE.NUMERIC", 0.0),
    ("Answer: ~30", "[28]", "ANSWER_TYPE.NUMERIC", 0.0),
    ("Answer: **28**", "[28]", "ANSWER_TYPE.NUMERIC", 1.0),
    ("Answer: 1_028", "[1028]", "ANSWER_TYPE.NUMERIC", 1.0),
    ("28", "[28]", "ANSWER_TYPE.NUMERIC", 1.0),
    ("**28**", "[28]", "ANSWER_TYPE.NUMERIC", 0.0),
    ("Answer: 12 (counted by hand)", "[12]", "ANSWER_TYPE.NUMERIC", 0.0),
    ("Answer: -3", "[0]", "ANSWER_TYPE.NUMERIC", 0.421875),
    ("User: 16809", "[16809]", "ANSWER_TYPE.USER", 1.0),
    ("User: user 16809", "[16809]", "ANSWER_TYPE.USER", 0.0),
    ("The user with the most instances is 16809", "[16809]", "ANSWER_TYPE.USER", 1.0),
    ("User: [16809]", "[16809]", "ANSWER_TYPE.USER", 1.0),
    ("User: 16808", "[16809]", "ANSWER_TYPE.USER", 0.0),
    ("Date: 05/17/2024", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 1.0),
    ("Date: May 17, 2024", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 1.0),
    ("Date: 2024-05-17", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 1.0),
    ("Date: [05/17/2024]", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 1.0),
    ("Date: 05/2024", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 0.0),
    ("Date: 2024-05", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 0.0),
    ("Date: 05/18/2024", "[datetime.date(2024, 5, 17)]", "ANSWER_TYPE.DATE", 0.0),
    ("Answer: May 2024", "['May 2024']", "ANSWER_TYPE.MONTH_YEAR", 1.0),
    ("Answer: may 2024", "['May 2024']", "ANSWER_TYPE.MONTH_YEAR", 0.0),
    ("Answer: 2024-05", "['May 2024']", "ANSWER_TYPE.MONTH_YEAR", 0.0),
    ("Answer: the same frequency", "['the same frequency']", "ANSWER_TYPE.COMPARISON", 1.0),
    ("Answer: entity is the same frequency before 2023-01-01", "['the same frequency']", "ANSWER_TYPE.COMPARISON", 1.0),
]
# (reply, gold letter, the original's judgement)
LONGBENCH = [
    ("The correct answer is (B)", "B", 1.0),
    ("The correct answer is B", "B", 1.0),
    ("The correct answer is (B).", "B", 1.0),
    ("**The correct answer is (B)**", "B", 1.0),
    ("The correct answer is **(B)**", "B", 1.0),
    ("B", "B", 0.0),
    ("(B)", "B", 0.0),
    ("**B**", "B", 0.0),
    ("Answer: B", "B", 0.0),
    ("The answer is (B)", "B", 0.0),
    ("the correct answer is (B)", "B", 0.0),
    ("The correct answer is: (B)", "B", 0.0),
    ("The correct answer is (b)", "B", 0.0),
    ("The correct answer is (A) or maybe (B)", "B", 0.0),
    ("I think (C) is wrong. The correct answer is (B)", "B", 1.0),
    ("The correct answer is (B) ... on reflection, The correct answer is (C)", "C", 0.0),
    ("The correct answer is B.", "B", 1.0),
    ("The correct answer is (B) pissa", "B", 1.0),
    ("  The correct answer is (B)\n", "B", 1.0),
    ("The correct answer is Both", "B", 1.0),
    ("The correct answer is (E)", "B", 0.0),
    ("The correct answer is  (B)", "B", 0.0),
    ("The correct answer is\n(B)", "B", 0.0),
]
# (prediction, references, the original's score / 100)
RULER = [
    ("1234567", ["1234567"], 1.0),
    (" 1234567.", ["1234567"], 1.0),
    ("The special magic number is 1234567", ["1234567"], 1.0),
    ("1,234,567", ["1234567"], 0.0),
    ("12345678", ["1234567"], 1.0),
    ("123 4567", ["1234567"], 0.0),
    ("7654321", ["1234567"], 0.0),
    ("", ["1234567"], 0.0),
    ("**1234567**", ["1234567"], 1.0),
    ("The number for wary-anchor is 1234567 and also 7654321", ["1234567"], 1.0),
    ("ABC-def", ["abc-DEF"], 1.0),
    ("one two", ["one", "three"], 0.5),
    ("one two three", ["one", "three"], 1.0),
    ("1234567\n", ["1234567"], 1.0),
    ("I could not find it.", ["1234567"], 0.0),
    ("١٢٣٤٥٦٧", ["1234567"], 0.0),
    ("1234567 1234567", ["1234567"], 1.0),
    ("0123456", ["1234567"], 0.0),
    ("id: 9f1c2a3b-0000-4000-8000-000000000000", ["9F1C2A3B-0000-4000-8000-000000000000"], 1.0),
    ("The special magic number for wary-anchor mentioned in the provided text is 1234567.", ["1234567"], 1.0),
    ("number: 123456", ["1234567"], 0.0),
]
GOLD_PAIRS = [[11111, 22222], [11111, 33333], [22222, 44444]]
ALL = "(11111, 22222)\n(11111, 33333)\n(22222, 44444)"
# (reply, gold pairs, F1 by the paper's definition)
PAIRS = [
    (ALL, GOLD_PAIRS, 1.0),
    ("(11111, 22222), (11111, 33333), (22222, 44444)", GOLD_PAIRS, 1.0),
    ("(11111,22222)\n(11111,33333)\n(22222,44444)", GOLD_PAIRS, 1.0),
    ("( 11111 , 22222 )\n(11111,\t33333)\n(22222,\n44444)", GOLD_PAIRS, 1.0),
    ("(22222, 11111)\n(11111, 33333)\n(22222, 44444)", GOLD_PAIRS, 1.0),
    ("(11111, 22222)\n(11111, 22222)\n(22222, 11111)", GOLD_PAIRS, 0.5),
    (ALL + "\n(11111, 11111)", GOLD_PAIRS, 6 / 7),
    (ALL + "\n(11111, 99999)", GOLD_PAIRS, 6 / 7),
    ("(11111, 22222)\n(11111, 33333)", GOLD_PAIRS, 0.8),
    ("(11111, 22222)\n(33333, 44444)", GOLD_PAIRS, 0.4),
    ("[]", GOLD_PAIRS, 0.0),
    ("", GOLD_PAIRS, 0.0),
    ("11111, 22222\n11111, 33333\n22222, 44444", GOLD_PAIRS, 0.0),
    ("[11111, 22222]\n[11111, 33333]", GOLD_PAIRS, 0.0),
    ("(user_id_1, user_id_2)\n" + ALL, GOLD_PAIRS, 1.0),
    ("FINAL((11111, 22222), (11111, 33333), (22222, 44444))", GOLD_PAIRS, 1.0),
    ("(11111, 22222, 33333)", GOLD_PAIRS, 0.0),
    ("[]", [], 1.0),
    ("", [], 1.0),
    ("(11111, 22222)", [], 0.0),
    ("(11111, 11111)", [], 0.0),
    ("Pairs: (11111 , 22222) and (44444, 22222).", GOLD_PAIRS, 0.8),
]


@pytest.mark.parametrize(("reply", "answer", "answer_type", "expected"), OOLONG)
def test_oolong_scores_as_the_original(reply, answer, answer_type, expected):
    assert oolong_synth_score(reply, answer, answer_type) == pytest.approx(expected)


def test_oolong_corpus_covers_the_replies_the_original_gives_no_credit():
    assert len(OOLONG) >= 20
    rows = {(reply, answer): (kind, want) for reply, answer, kind, want in OOLONG}
    examples = [
        ("Label: **entity**.", "['entity']"),
        ("The most common label is entity.", "['entity']"),
        ("Answer: MORE COMMON THAN", "['more common than']"),
        ("Answer: 1,028", "[1028]"),
        ("Answer: 28 entities", "[28]"),
        ("Answer: ~30", "[28]"),
        ("User: user 16809", "[16809]"),
        ("Date: 05/2024", "[datetime.date(2024, 5, 17)]"),
        ("Date: 2024-05", "[datetime.date(2024, 5, 17)]"),
    ]
    for reply, answer in examples:
        kind, want = rows[reply, answer]
        assert want == 0.0, reply
        assert oolong_synth_score(reply, answer, kind) == 0.0, reply


def test_oolong_candidate_follows_the_original_parse():
    assert oolong_candidate("Answer: entity is less common than location") == "less common"
    assert oolong_candidate("Answer: more common than") == "more common than"  # under 20 characters: kept
    assert oolong_candidate("**28**") == "**28**"  # no colon and short: taken whole, marks and all
    assert oolong_candidate(" " * 30) == ""  # the original raises IndexError here; we score it 0


@pytest.mark.parametrize(("reply", "gold", "expected"), LONGBENCH)
def test_longbench_judges_as_the_original(reply, gold, expected):
    assert longbench_score(reply, gold) == expected


def test_longbench_corpus_gives_a_bare_letter_no_credit():
    assert len(LONGBENCH) >= 20
    bare = {reply for reply, _gold, want in LONGBENCH if want == 0.0}
    assert {"B", "(B)", "**B**", "Answer: B"} <= bare
    assert longbench_extract_answer("The correct answer is (A) or maybe (B)") == "A"


@pytest.mark.parametrize(("prediction", "references", "expected"), RULER)
def test_ruler_scores_as_the_original(prediction, references, expected):
    assert ruler_string_match_all(prediction, references) == pytest.approx(expected)


@pytest.mark.parametrize(("reply", "gold", "expected"), PAIRS)
def test_pairs_f1_follows_the_papers_definition(reply, gold, expected):
    assert pairs_f1(reply, gold) == pytest.approx(expected)


def test_pairs_keep_self_pairs_as_wrong_predictions():
    assert len(PAIRS) >= 20
    assert parse_pairs("(5, 5)\n(2, 1)") == {(5, 5), (1, 2)}
    assert pairs_f1(ALL + "\n(11111, 11111)", GOLD_PAIRS) == pytest.approx(6 / 7)
