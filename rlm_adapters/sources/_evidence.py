"""Where an answer's words and exact strings lie in the input text that reached a model.

One Aho–Corasick pass over the reached ranges only (`_scan`), case-folded, for the answer's distinctive
word stems and its exact claims at once. A word counts where it stands whole (`_words.word_at`); a word
found on more than `WORD_LINES` reached lines is too common to point anywhere and is left out. An exact
string must match case and all, with nothing of a word or number glued to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._provenance import DocumentUse
from rlm_adapters.sources._scan import scan
from rlm_adapters.sources._words import word_at

WORD_LINES = 2000
ExactKind = Literal["number", "name", "quote"]


@dataclass
class Evidence:
    """What of an answer the reached text holds.

    Attributes:
        lines: ``(document, 0-based line)`` -> the answer's stems on that line.
        where: ``(document, 0-based line)`` -> an offset on that line.
        common: Stems found on too many lines to count.
        exact: Per exact string (by its index), the first ``(document, offset)`` where it stands.
    """

    lines: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    where: dict[tuple[int, int], int] = field(default_factory=dict)
    common: set[str] = field(default_factory=set)
    exact: dict[int, tuple[int, int]] = field(default_factory=dict)


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
    evidence = Evidence()
    if not uses or not (words or exacts):
        return evidence
    patterns = [*words, *(text for text, _ in exacts)]
    ranges = ((use.index, documents[use.index].text, start, end) for use in uses for start, end in use.ranges)
    hits: dict[int, list[tuple[int, str]]] = {}  # document -> (offset, stem)
    seen_lines: dict[str, int] = {}
    for which, doc, offset in scan(ranges, patterns, fold=True, cap=WORD_LINES * 8):
        text = documents[doc].text
        if which < len(words):
            word = words[which]
            if word not in evidence.common and word_at(text, offset, len(word)):
                hits.setdefault(doc, []).append((offset, word))
                seen_lines[word] = seen_lines.get(word, 0) + 1
                if seen_lines[word] > WORD_LINES * 4:
                    evidence.common.add(word)
            continue
        index = which - len(words)
        exact, kind = exacts[index]
        if index not in evidence.exact and text.startswith(exact, offset) and bounded(text, offset, len(exact), kind):
            evidence.exact[index] = (doc, offset)
    for doc, found in hits.items():
        lines = documents[doc].lines_of([offset for offset, _ in found])
        for line, (offset, word) in zip(lines, found, strict=True):
            if word not in evidence.common:
                evidence.lines.setdefault((doc, line), set()).add(word)
                evidence.where.setdefault((doc, line), offset)
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
    return evidence


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
