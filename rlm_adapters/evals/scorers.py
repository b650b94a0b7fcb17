"""The scorers of `rlm eval`: each original benchmark's scorer, rewritten to make the same decisions.

- OOLONG (oolong-synth, ``src/eval/eval_helpers.py``: ``synth_attempt_answer_parse`` and
  ``synth_process_response``): the candidate is the text after the last ``:`` (stripped, then ``*``, ``[``
  and ``]`` removed); a reply without a colon is taken whole when under 20 characters, else its last word.
  A candidate of 20 characters or more that contains "more common", "less common" or "same frequency" is
  reduced to that phrase. Exact string match with the gold scores 1; a reduced comparison phrase scores 1
  when it occurs in the gold; a numeric gold scores ``0.75 ** |gold - int(candidate)|`` (Python's `int`, so
  ``1,028`` and ``28 entities`` score 0 while ``1_028`` parses); a date gold must equal the parsed date.
  One deliberate difference: the original fills a date's missing day or month from the day it runs
  (dateutil's default), so ``05/2024`` could match on one day of the month; here an incomplete date never
  matches, which is what the original gives on every other day.
- LongBench v2 (``pred.py``: ``extract_answer``, applied to the stripped reply): ``*`` removed, then the
  first ``The correct answer is (X)``, else the first ``The correct answer is X``, case-sensitive; a bare
  ``B`` or ``Answer: B`` chooses nothing.
- RULER (``scripts/eval/synthetic/constants.py``: ``string_match_all``): the share of gold strings found in
  the reply, ignoring case.
- OOLONG-Pairs: the RLM paper states "F1 scores over the answer" and the format ``(user_id_1, user_id_2)``,
  lower ID first, no duplicates, and publishes no scorer. Pairs are read only in that parenthesised form;
  a reversed pair names the same unordered pair; a self-pair ``(a, a)`` is kept as a (wrong) prediction.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from rlm_adapters._extras import require

COMPARISON_PHRASES = ("more common", "less common", "same frequency")
NUMERIC, DATE = "ANSWER_TYPE.NUMERIC", "ANSWER_TYPE.DATE"
_GOLD_DATE = "[datetime.date(%Y, %m, %d)]"
# Two defaults that differ in every date field: a string that names all of them parses the same way twice.
_DEFAULTS = (datetime(2000, 1, 1), datetime(2001, 2, 2))
_PAIR = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def oolong_candidate(output: str) -> str:
    """The part of a reply that oolong-synth's parser compares with the gold answer."""
    if ":" not in output:
        if len(output) < 20:
            return output
        words = output.split()
        return words[-1] if words else ""
    candidate = output.split(":")[-1].strip()
    for mark in ("*", "[", "]"):
        candidate = candidate.replace(mark, "")
    if len(candidate) < 20:
        return candidate
    for phrase in COMPARISON_PHRASES:
        if phrase in candidate:
            return phrase
    return candidate


def oolong_gold(answer: str) -> Any:
    """The gold value of an oolong-synth ``answer`` field (``"['entity']"``, ``"[28]"``, a date list)."""
    if "datetime" in answer:
        return datetime.strptime(answer, _GOLD_DATE)
    return ast.literal_eval(answer)[0]


def _full_date(text: str) -> datetime | None:
    parser: Any = require("dateutil.parser", extra="eval", feature="OOLONG date scoring")
    try:
        first, second = (parser.parse(text, default=default) for default in _DEFAULTS)
    except Exception:  # the original treats any parse failure as "not a date"
        return None
    return first if first == second else None


def oolong_synth_score(output: str, answer: str, answer_type: str) -> float:
    """Score a reply as oolong-synth's ``synth_process_response`` does.

    Args:
        output: The model's reply.
        answer: The row's ``answer`` field, e.g. ``"['entity']"``, ``"[28]"``, ``"[datetime.date(2024, 5, 17)]"``.
        answer_type: The row's ``answer_type``, e.g. ``ANSWER_TYPE.NUMERIC``.
    """
    gold = oolong_gold(answer)
    candidate = oolong_candidate(output)
    if candidate == str(gold):
        return 1.0
    if candidate in COMPARISON_PHRASES:
        return 1.0 if candidate in str(gold) else 0.0
    if answer_type == NUMERIC:
        try:
            return float(0.75 ** abs(int(gold) - int(candidate)))
        except ValueError:
            return 0.0
    if answer_type == DATE:
        return 1.0 if _full_date(candidate) == gold else 0.0
    return 0.0


def longbench_extract_answer(response: str) -> str | None:
    """LongBench v2's ``extract_answer`` on the stripped reply: the chosen letter, or None."""
    text = response.strip().replace("*", "")
    for pattern in (r"The correct answer is \(([A-D])\)", r"The correct answer is ([A-D])"):
        match = re.search(pattern, text)
        if match:
            return match.group(1)
    return None


def longbench_score(response: str, gold: str) -> float:
    """1.0 when LongBench v2 would judge the reply correct."""
    return 1.0 if longbench_extract_answer(response) == gold else 0.0


def ruler_string_match_all(prediction: str, references: Sequence[str]) -> float:
    """RULER's ``string_match_all`` for one prediction (a share in [0, 1], not RULER's percentage)."""
    if not references:
        return 0.0
    text = prediction.lower()
    return sum(ref.lower() in text for ref in references) / len(references)


def parse_pairs(answer: str) -> set[tuple[int, int]]:
    """The ``(id, id)`` pairs of a reply as unordered pairs (low, high); self-pairs are kept."""
    return {(min(int(a), int(b)), max(int(a), int(b))) for a, b in _PAIR.findall(answer)}


def pairs_f1(answer: str, gold: Iterable[Sequence[int]]) -> float:
    """F1 between the reply's pairs and the gold pairs (in either order); 1.0 when both are empty."""
    got = parse_pairs(answer)
    want = {(min(a, b), max(a, b)) for a, b in gold}
    if not want and not got:
        return 1.0
    hits = len(want & got)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(got), hits / len(want)
    return 2 * precision * recall / (precision + recall)
