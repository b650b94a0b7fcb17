"""Cited sources: the lines of the input that reached a model and support the answer.

Of the lines that reached a model (`_provenance`), the ones cited are those that share the answer's
distinctive words (`_evidence`): a word counts ``1 / (number of reached lines holding it)``, so an
identifier or number that appears on one line weighs fully and a common word next to nothing (words of one
or two characters and stop words do not count, so a count such as "20 times" does not cite a 10:20
timestamp). Lines scoring at least `MIN_LINE_SCORE` (or half the best score, when no line reaches it) are
merged with neighbours (within `MERGE_GAP` lines) into spans, ranked by score and capped at `MAX_SOURCES`.
When the answer shares nothing distinctive with what was read (a yes/no answer, a paraphrase), the reached
ranges themselves are cited, largest first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlm_adapters.core import Claim, Source
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._evidence import Evidence, Unit, search
from rlm_adapters.sources._provenance import DocumentUse
from rlm_adapters.sources._words import distinctive

MAX_SOURCES = 8
UNFINISHED = "sources not finished"  # how the note of sources cut short begins (`SourceTracker.unfinished`)
EXCERPT_CHARS = 240
MIN_LINE_SCORE = 0.5
MERGE_GAP = 1
CLAIM_CHARS = 80  # an unsupported claim is quoted this far in the block


def as_documents(documents: Sequence[Document | tuple[str, str]]) -> list[Document]:
    """Documents given as `Document` or as ``(path, text)``."""
    return [d if isinstance(d, Document) else Document(d[0], d[1]) for d in documents]


def cite(
    documents: Sequence[Document | tuple[str, str]],
    uses: Sequence[DocumentUse],
    answer: str,
    *,
    limit: int = MAX_SOURCES,
) -> list[Source]:
    """The sources of `answer`, from the documents' ranges that reached a model.

    Args:
        documents: The corpus, in the order the ranges were found in.
        uses: The documents used (`ProvenanceTracker.resolve`).
        answer: The run's answer.
        limit: At most this many sources.
    """
    corpus = as_documents(documents)
    return choose(corpus, uses, search(corpus, uses, distinctive(answer)), limit)[0]


def choose(
    documents: Sequence[Document], uses: Sequence[DocumentUse], evidence: Evidence, limit: int
) -> tuple[list[Source], bool]:
    """The sources the evidence gives, and whether they are only the ranges read (nothing distinctive)."""
    frequency: dict[str, int] = {}
    for words in evidence.lines.values():
        for word in words:
            frequency[word] = frequency.get(word, 0) + 1
    # fsum: exactly rounded, so equal lines score equally whatever order their words come in.
    scores = {key: math.fsum(1 / frequency[w] for w in words) for key, words in evidence.lines.items() if words}
    for unit, offset in evidence.quoted.items():  # a passage quoted word for word weighs as a rare word
        scores[unit] = scores.get(unit, 0.0) + 1.0
        evidence.where.setdefault(unit, offset)
    # A line carrying a rare word of the answer passes MIN_LINE_SCORE; when the answer's words are all
    # common among the lines read (one error repeated in a log), the lines closest to the best one do.
    threshold = min(MIN_LINE_SCORE, max(scores.values(), default=0.0) / 2)
    chosen = {key: score for key, score in scores.items() if score > 0 and score >= threshold}
    if not chosen:
        return whole_ranges(documents, uses, limit), True
    spans: list[tuple[float, Unit, Unit, Unit]] = []  # score, first unit, last unit, best unit
    for unit in sorted(chosen):
        score = chosen[unit]
        if spans and _near(spans[-1][2], unit):
            total, first, _, best = spans[-1]
            spans[-1] = (total + score, first, unit, unit if score > chosen[best] else best)
        else:
            spans.append((score, unit, unit, unit))
    spans.sort(key=lambda s: (-s[0], s[1]))
    sources = []
    for _, first, last, best in spans[:limit]:
        document = documents[first[0]]
        focus = evidence.where[best]  # the excerpt of a long span shows its best line
        begin = document.unit(evidence.where[first])[1]
        end = document.unit(evidence.where[last])[2]
        sources.append(span_source(document, begin, end, first[1], last[1], focus, chars=bool(first[2] or last[2])))
    return sources, False


def _near(before: Unit, after: Unit) -> bool:
    """Whether two units of the answer's evidence are close enough to be cited as one span."""
    if before[0] != after[0]:
        return False
    if before[2] and after[2] and before[1] == after[1]:
        return after[2] - before[2] <= MERGE_GAP + 1  # pieces of one long line
    return not before[2] and not after[2] and after[1] - before[1] <= MERGE_GAP + 1


def line_source(document: Document, offset: int) -> Source:
    """The line of `document` holding `offset` (on a line too long to cite by, the piece of it around
    `offset`), as a source (its excerpt around `offset`)."""
    piece, begin, end = document.unit(offset)
    line = document.line_of(offset)
    return span_source(document, begin, end, line, line, offset, chars=piece > 0)


def span_source(
    document: Document,
    begin: int,
    end: int,
    first: int,
    last: int,
    focus: int | None = None,
    *,
    chars: bool = False,
) -> Source:
    """Characters ``begin..end`` of `document`, on 0-based lines ``first..last``, as a source.

    Its excerpt is the span when short; else about `EXCERPT_CHARS` of it: from its start, or the line of
    `focus` (where the answer's words are), or that line around `focus` when the line is long. With `chars`
    (a span of a line too long to cite by), the source also names its characters.
    """
    if end - begin <= EXCERPT_CHARS:
        excerpt = document.text[begin:end].strip("\n")
    else:
        _, low, high = (0, begin, end) if focus is None else document.unit(focus)
        low, high = max(low, begin), min(high, end)
        start = low if focus is None or high - low <= EXCERPT_CHARS else max(low, focus - EXCERPT_CHARS // 3)
        stop = min(high, start + EXCERPT_CHARS - 2)
        excerpt = ("…" if start > begin else "") + document.text[start:stop].strip() + ("…" if stop < end else "")
    place = document.place_of(begin, end, (first, last))
    if chars and place is None:
        return Source(document.path, first + 1, last + 1, end - begin, excerpt, None, begin, end)
    return Source(document.path, first + 1, last + 1, end - begin, excerpt, place)


def whole_ranges(documents: Sequence[Document], uses: Sequence[DocumentUse], limit: int) -> list[Source]:
    """The largest ranges that reached a model, as whole lines (as they are, on a line too long to cite by)."""
    ranges = sorted(((end - start, use.index, start, end) for use in uses for start, end in use.ranges), reverse=True)
    sources = []
    for _, doc, start, end in ranges[:limit]:
        document = documents[doc]
        first, last = document.lines_of([start, max(start, end - 1)])
        head, begin, _ = document.unit(start)
        tail, _, stop = document.unit(max(start, end - 1))
        begin, stop = start if head else begin, end if tail else stop
        sources.append(span_source(document, begin, stop, first, last, chars=bool(head or tail)))
    return sources


def sources_block(sources: Sequence[Source], claims: Sequence[Claim] = (), note: str | None = None) -> str:
    """The ``Sources:`` block that ends a text answer: one ``path:start-end`` per line, then an
    ``Unsupported:`` line naming the claims no input that reached a model holds. Empty when there is
    neither (`note`, why there are no sources, is then only in the structured results), unless the sources
    were not finished: that is always said, in one line (``(sources not finished, cut at 10 s ...: the
    claims were not checked)``), so that no one reads a missing ``Unsupported:`` line as "all supported"."""
    unsupported = [claim for claim in claims if not claim.supported]
    cut = note is not None and note.startswith(UNFINISHED)
    if sources:
        block = "Sources:\n" + "\n".join(f"- {source.location}" for source in sources)
        if cut:
            block += f"\n({note})"
    elif unsupported or cut:
        block = f"Sources: none ({note or 'nothing the answer rests on reached a model'})"
    else:
        return ""
    if unsupported:
        block += "\nUnsupported: " + "; ".join(_claim_line(claim) for claim in unsupported)
    return block


def _claim_line(claim: Claim) -> str:
    text = " ".join(claim.text.split())
    if len(text) > CLAIM_CHARS:
        text = text[: CLAIM_CHARS - 1].rstrip() + "…"
    return f'"{text}" ({claim.reason})' if claim.reason else f'"{text}"'
