"""Where an answer's words and exact strings lie in the input text that reached a model.

One Aho–Corasick pass over the reached ranges only (`_scan`), case-folded, for the answer's distinctive
word stems and its exact claims at once: over everything a model was shown, each hit also marked as read or
not (`search_read_seen`), so the two sets of ranges cost one pass. A word counts where it stands whole
(`_words.word_at`); a word found on more than `WORD_LINES` reached units is too common to point anywhere and
is left out. An exact string must match case and all, with nothing of a word or number glued to it.

Hits are counted by unit (`Document.unit`): a line, or a piece of a line too long to cite by (a one-line
input), so that a 40 MB line is not one place holding every word.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rlm_adapters.sources._documents import BLOCK, Document
from rlm_adapters.sources._provenance import DocumentUse
from rlm_adapters.sources._scan import check_halt, scan
from rlm_adapters.sources._words import word_at

WORD_LINES = 2000
ExactKind = Literal["number", "name", "quote"]
# A unit of a document: (document, 0-based line, piece of the line: 0 for a whole line, see `Document.unit`).
Unit = tuple[int, int, int]
_FAR = 1 << 62


@dataclass
class Evidence:
    """What of an answer the reached text holds.

    Attributes:
        lines: Unit -> the answer's stems in it.
        where: Unit -> an offset in it.
        common: Stems found in too many units to count.
        exact: Per exact string (by its index), the first ``(document, offset)`` where it stands.
        quoted: The units where a quote of the answer stands, with where it starts (cited however common
            its words are: a passage quoted word for word is where the answer came from).
    """

    lines: dict[Unit, set[str]] = field(default_factory=dict)
    where: dict[Unit, int] = field(default_factory=dict)
    common: set[str] = field(default_factory=set)
    exact: dict[int, tuple[int, int]] = field(default_factory=dict)
    quoted: dict[Unit, int] = field(default_factory=dict)


def neighbours(unit: Unit) -> list[Unit]:
    """The unit and those just before and after it (the lines around a line, the pieces around a piece)."""
    doc, line, piece = unit
    if piece == 0:
        return [(doc, line - 1, 0), unit, (doc, line + 1, 0)]
    return [(doc, line, piece - 1), unit, (doc, line, piece + 1)]


def search(
    documents: Sequence[Document],
    uses: Sequence[DocumentUse],
    words: Sequence[str],
    exacts: Sequence[tuple[str, ExactKind]] = (),
) -> Evidence:
    """Find `words` (stems) and `exacts` in the ranges of `uses`.

    Args:
        documents: The corpus.
        uses: The documents' ranges that reached a model.
        words: Distinctive stems of the answer (lowercase).
        exacts: Exact strings and their kinds.
    """
    return search_read_seen(documents, uses, uses, words, exacts)[0]


def search_read_seen(
    documents: Sequence[Document],
    read: Sequence[DocumentUse],
    seen: Sequence[DocumentUse],
    words: Sequence[str],
    exacts: Sequence[tuple[str, ExactKind]] = (),
) -> tuple[Evidence, Evidence]:
    """`search` of the ranges read and of those seen (which hold them), from one pass over those seen."""
    evidence = (Evidence(), Evidence())
    if not seen or not (words or exacts):
        return evidence
    patterns = [*words, *(text for text, _ in exacts)]
    ranges = ((use.index, documents[use.index].text, start, end) for use in seen for start, end in use.ranges)
    hits: dict[int, list[tuple[int, int]]] = {}  # document -> (offset, pattern)
    for which, doc, offset in scan(ranges, patterns, fold=True, cap=WORD_LINES * 8):
        hits.setdefault(doc, []).append((offset, which))
    read_ranges = {use.index: use.ranges for use in read}
    count = len(words)
    hits_of: dict[str, int] = {}  # a word found more often than this cap is common, whatever its units
    for doc, places in hits.items():
        document = documents[doc]
        text = document.text
        places.sort()
        inside = read_ranges.get(doc, [])
        at_range = 0  # the first read range that does not end before the hit (hits come in text order)
        unit_end, unit = -1, (doc, 0, 0)
        line, previous = 0, 0
        seen_stems: set[str] = set()
        read_stems: set[str] | None = None
        for number, (offset, which) in enumerate(places):
            if not number & 0xFFFF:
                check_halt()  # an answer of thousands of common words gives millions of hits: cut, stop here
            if which >= count:
                _exact(evidence, read_ranges.get(doc), exacts[which - count], which - count, text, doc, offset)
                continue
            word = words[which]
            if not word_at(text, offset, len(word)):
                continue
            if offset >= unit_end:  # a unit's line and piece are worked out once, for its first word
                piece, _, unit_end = document.unit(offset)
                far = offset - previous > BLOCK
                line = document.line_of(offset) if far else line + text.count("\n", previous, offset)
                previous, unit = offset, (doc, line, piece)
                seen_stems = evidence[1].lines.setdefault(unit, set())
                evidence[1].where.setdefault(unit, offset)
                read_stems = None
            seen_stems.add(word)
            hits_of[word] = hits_of.get(word, 0) + 1
            while at_range < len(inside) and inside[at_range][1] <= offset:
                at_range += 1
            if at_range < len(inside) and inside[at_range][0] <= offset:
                if read_stems is None:
                    read_stems = evidence[0].lines.setdefault(unit, set())
                    evidence[0].where.setdefault(unit, offset)
                read_stems.add(word)
    often = {word for word, found in hits_of.items() if found > WORD_LINES * 4}
    for each in evidence:
        each.common |= often
    for each in evidence:
        _drop_common(each)
        for index, (doc, offset) in each.exact.items():
            if exacts[index][1] == "quote":
                document = documents[doc]
                each.quoted.setdefault((doc, document.line_of(offset), document.unit(offset)[0]), offset)
    return evidence


def _within(ranges: list[tuple[int, int]], offset: int) -> bool:
    at = bisect.bisect_right(ranges, (offset, _FAR)) - 1
    return at >= 0 and offset < ranges[at][1]


def _exact(
    evidence: tuple[Evidence, Evidence],
    read: list[tuple[int, int]] | None,
    exact: tuple[str, ExactKind],
    index: int,
    text: str,
    doc: int,
    offset: int,
) -> None:
    """Record where an exact string stands (hits come in text order: the first place is kept)."""
    string, kind = exact
    if not (text.startswith(string, offset) and bounded(text, offset, len(string), kind)):
        return
    evidence[1].exact.setdefault(index, (doc, offset))
    if read is not None and _within(read, offset):
        evidence[0].exact.setdefault(index, (doc, offset))


def _drop_common(evidence: Evidence) -> None:
    frequency: dict[str, int] = {}
    for stems in evidence.lines.values():
        for word in stems:
            frequency[word] = frequency.get(word, 0) + 1
    evidence.common |= {word for word, count in frequency.items() if count > WORD_LINES}
    if evidence.common:
        for key in list(evidence.lines):
            evidence.lines[key] -= evidence.common
            if not evidence.lines[key]:
                del evidence.lines[key]


def bounded(text: str, start: int, size: int, kind: ExactKind) -> bool:
    """Whether the exact string at ``text[start:start + size]`` stands alone (not inside a longer token)."""
    if kind == "quote":
        return True
    before = text[start - 1] if start > 0 else ""
    after = text[start + size] if start + size < len(text) else ""
    if before.isalnum() or after.isalnum() or before == "_" or after == "_":
        return False
    if kind == "number":
        # 1,234 is not 234 and 3.14 is not 3: a separator joined to more digits continues the number.
        if before in ".," and text[start - 2 : start - 1].isdigit():
            return False
        if after in ".," and text[start + size + 1 : start + size + 2].isdigit():
            return False
    return True
