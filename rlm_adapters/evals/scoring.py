"""Scorers, each following its benchmark's own evaluation code, and the summary statistics.

- S-NIAH: RULER's ``string_match_all``: the share of gold values found in the answer, case-insensitive.
- OOLONG: the repository's ``synth_process_response``: the text after the last ``:`` with whitespace,
  ``*``, ``[`` and ``]`` removed; exact match scores 1; a comparison answer ("more common", "less
  common", "same frequency") scores 1 when it appears inside the gold answer; numbers score
  ``0.75 ** |gold - answer|``; dates are parsed and compared. Two documented leniencies: labels compare
  case-insensitively without trailing punctuation, and a number is the first integer of the candidate
  (so ``Answer: 12 (counted by hand)`` reads 12 where the original scores 0).
- OOLONG-Pairs: F1 between the set of ``(id, id)`` pairs in the answer and the gold set.
- CodeQA: LongBench v2's ``extract_answer`` (``The correct answer is (X)``), falling back to a lone
  letter (``B``, ``(B)``, ``**B**``, ``Answer: B``) since RLM answers are often just the letter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime

COMPARISONS = ("more common", "less common", "same frequency")
_DATE_FORMATS = (
    "%B %Y",
    "%b %Y",
    "%B, %Y",
    "%b, %Y",
    "%Y-%m",
    "%m/%Y",
    "%Y/%m",
    "%Y-%m-%d",
    "%b %d, %Y",
    "%B %d, %Y",
)


def sniah_score(answer: str, golds: Sequence[str]) -> float:
    """RULER ``string_match_all``: the fraction of `golds` contained in `answer`, ignoring case."""
    if not golds:
        return 0.0
    text = answer.lower()
    return sum(gold.lower() in text for gold in golds) / len(golds)


def oolong_candidate(answer: str) -> str:
    """The part of a reply OOLONG scores: after the last colon, without whitespace, ``*``, ``[``, ``]``.

    A reply without a colon is taken whole when short (under 20 characters), else its last word, as the
    original parser does.
    """
    if ":" in answer:
        candidate = answer.rsplit(":", 1)[1]
    elif len(answer.strip()) < 20:
        candidate = answer
    else:
        candidate = answer.split()[-1] if answer.split() else ""
    for mark in ("*", "[", "]"):
        candidate = candidate.replace(mark, "")
    candidate = candidate.strip()
    for phrase in COMPARISONS:
        if phrase in candidate.lower():
            return phrase
    return candidate


def _first_int(text: str) -> int | None:
    match = re.search(r"-?\d[\d,]*", text)
    if match is None:
        return None
    return int(match.group().replace(",", ""))


def parse_month(text: str) -> tuple[int, int] | None:
    """(year, month) of a date written in one of the usual forms, or None."""
    cleaned = text.strip().strip(".").strip()
    for fmt in _DATE_FORMATS:
        try:
            parsed = datetime.strptime(cleaned, fmt)
        except ValueError:
            continue
        return parsed.year, parsed.month
    return None


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().strip(".'\"`").strip()).lower()


def oolong_score(answer: str, gold: str | int, answer_type: str) -> float:
    """Score one OOLONG reply.

    Args:
        answer: The model's reply.
        gold: The gold answer (a label, a user id, a comparison phrase, a count, or ``YYYY-MM``).
        answer_type: ``label``, ``comparison``, ``number``, ``user`` or ``date``.
    """
    candidate = oolong_candidate(answer)
    if candidate == str(gold) or _normal(candidate) == _normal(str(gold)):
        return 1.0
    if candidate in COMPARISONS:
        return 1.0 if candidate in str(gold) else 0.0
    if answer_type in ("number", "user"):
        value = _first_int(candidate)
        if value is None:
            return 0.0
        if answer_type == "user":
            return 1.0 if value == int(gold) else 0.0
        return float(0.75 ** abs(int(gold) - value))
    if answer_type == "date":
        got, want = parse_month(candidate), parse_month(str(gold))
        return 1.0 if got is not None and got == want else 0.0
    return 0.0


_PAIR = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_pairs(answer: str) -> set[tuple[int, int]]:
    """Every ``(a, b)`` pair of integers in `answer`, as sorted tuples (order inside a pair is free)."""
    pairs: set[tuple[int, int]] = set()
    for left, right in _PAIR.findall(answer):
        a, b = int(left), int(right)
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    return pairs


def pairs_f1(answer: str, gold: Iterable[Sequence[int]]) -> float:
    """F1 between the pairs of `answer` and `gold`; 1.0 when both are empty."""
    return set_f1(parse_pairs(answer), gold)


def set_f1(got: set[tuple[int, int]], gold: Iterable[Sequence[int]]) -> float:
    """F1 between parsed (low, high) pairs and the gold pairs (in either order); 1.0 when both are empty."""
    want = {(min(a, b), max(a, b)) for a, b in gold}
    if not want and not got:
        return 1.0
    hits = len(want & got)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(got), hits / len(want)
    return 2 * precision * recall / (precision + recall)


def extract_choice(answer: str) -> str | None:
    """The letter A-D a reply chooses, or None when it names none unambiguously."""
    text = answer.replace("*", "")
    for pattern in (r"The correct answer is \(([A-D])\)", r"The correct answer is ([A-D])"):
        match = re.search(pattern, text)
        if match:
            return match.group(1)
    stripped = text.strip()
    if ":" in stripped:
        stripped = stripped.rsplit(":", 1)[1].strip()
    match = re.fullmatch(r"[\(\[]?([A-D])[\)\]]?[.)]?", stripped)
    return match.group(1) if match else None


def choice_score(answer: str, gold: str) -> float:
    """1.0 when the reply's letter is `gold`, else 0.0."""
    return 1.0 if extract_choice(answer) == gold else 0.0


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and 95% interval (normal approximation, clipped to [0, 1]); a single value has no width."""
    if not values:
        return math.nan, math.nan, math.nan
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = 1.96 * sd / math.sqrt(n)
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for fewer than two values)."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
