"""Cited sources: the lines of the input that reached a model and support the answer.

Built on `rlm_adapters.sources._provenance`, which finds the character ranges of each document that crossed
the sandbox boundary towards a model (sub-call prompts, cell output shown to the root model). Those
exact texts are seen by the host for every sandbox kind, so sources are computed on the host after the
run, never guessed by the model. Of the lines that reached a model, the ones cited are those that share
the answer's distinctive words: a word counts ``1 / (number of reached lines holding it)``, so an
identifier or number that appears on one line weighs fully and a common word next to nothing (words of one
or two characters and stop words do not count, so a count such as "20 times" does not cite a 10:20 timestamp).
Lines scoring at least `MIN_LINE_SCORE` (or half the best score, when no line reaches it) are merged with
neighbours (within `MERGE_GAP` lines) into spans, ranked by score and capped. When the answer shares
nothing distinctive with what was read (a yes/no answer, a paraphrase), the reached ranges themselves are
cited, largest first.

A document's path is its ``metadata["path"]``, else its ``id``, else ``context[i]``; a plain string
context is one document named by the caller (``text`` in the MCP server, ``context`` elsewhere).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import re
from collections.abc import Sequence
from typing import Any

from rlm_adapters.core.events import Event
from rlm_adapters.core.result import Source
from rlm_adapters.sources._provenance import DocumentIndex, DocumentUse, ProvenanceTracker

logger = logging.getLogger("rlm_adapters.citations")
MAX_SOURCES = 8
EXCERPT_CHARS = 240
MIN_LINE_SCORE = 0.5
MERGE_GAP = 1
# Above this many characters of input, sources are not computed. Worst case (every document sent to a
# sub-model) the provenance index and matching cost about 0.55 s and 13 MB per million characters on the
# development machine (``python -m benchmarks.citations_bench``: 4 MB 1.6 s, 16 MB 8.6 s, 30 MB 16.5 s / +390 MB).
MAX_INDEXED_CHARS = 32_000_000
_WORD = re.compile(r"[^\W_]+")
_STOP = frozenset(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "from",
        "by",
        "with",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
        "not",
        "no",
        "yes",
        "but",
        "if",
        "then",
        "than",
        "so",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "which",
        "who",
        "whom",
        "what",
        "when",
        "where",
        "why",
        "how",
        "file",
        "files",
        "line",
        "lines",
        "answer",
        "there",
        "their",
        "they",
        "them",
        "he",
        "she",
        "his",
        "her",
        "you",
        "your",
        "we",
        "our",
        "i",
    ]
)


def documents_of(context: Any, text_name: str = "context") -> list[tuple[str, str]]:
    """``(path, text)`` of each document of a run's context that has text.

    Args:
        context: A string, a list of strings or ``{"id", "text"/"content", "metadata"}`` dicts, or a dict.
        text_name: The path given to a plain string context.
    """
    if isinstance(context, str):
        return [(text_name, context)]
    documents: list[tuple[str, str]] = []
    if isinstance(context, dict):
        return [(str(key), value) for key, value in context.items() if isinstance(value, str)]
    for index, item in enumerate(context if isinstance(context, list | tuple) else []):
        if isinstance(item, str):
            documents.append((f"context[{index}]", item))
        elif isinstance(item, dict):
            text = item.get("text", item.get("content"))
            if not isinstance(text, str):
                continue
            metadata = item.get("metadata")
            path = metadata.get("path") if isinstance(metadata, dict) else None
            documents.append((str(path or item.get("id") or f"context[{index}]"), text))
    return documents


def line_starts(text: str) -> list[int]:
    """Character offsets where each line of `text` starts."""
    starts = [0]
    find = text.find
    at = find("\n")
    while at != -1:
        starts.append(at + 1)
        at = find("\n", at + 1)
    return starts


def line_of(starts: list[int], offset: int) -> int:
    """The 0-based line holding character `offset`."""
    return bisect.bisect_right(starts, offset) - 1


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in _STOP}


def _excerpt(text: str) -> str:
    text = text.strip("\n")
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1].rstrip() + "…"


def cite(
    documents: Sequence[tuple[str, str]],
    uses: Sequence[DocumentUse],
    answer: str,
    *,
    limit: int = MAX_SOURCES,
) -> list[Source]:
    """The sources of `answer`, from the documents' ranges that reached a model.

    Args:
        documents: ``(path, text)`` in the order the provenance index was built.
        uses: The documents used (`ProvenanceTracker.resolve`).
        answer: The run's answer.
        limit: At most this many sources.
    """
    wanted = _words(answer)
    starts_of: dict[int, list[int]] = {}
    # The reached lines holding a word of the answer: (document, 0-based line) -> those words. Found with
    # one regular expression over the reached ranges, so lines without any of them cost nothing.
    lines: dict[tuple[int, int], set[str]] = {}
    if wanted:
        alternatives = "|".join(sorted(map(re.escape, wanted), key=len, reverse=True))
        pattern = re.compile(rf"(?<![^\W_])(?:{alternatives})(?![^\W_])", re.IGNORECASE)
        for use in uses:
            text = documents[use.index][1]
            for start, end in use.ranges:
                for match in pattern.finditer(text, start, end):
                    if use.index not in starts_of:
                        starts_of[use.index] = line_starts(text)
                    key = (use.index, line_of(starts_of[use.index], match.start()))
                    lines.setdefault(key, set()).add(match.group().lower())
    frequency: dict[str, int] = {}
    for words in lines.values():
        for word in words:
            frequency[word] = frequency.get(word, 0) + 1
    scores = {key: sum(1 / frequency[w] for w in words) for key, words in lines.items() if words}
    # A line carrying a rare word of the answer passes MIN_LINE_SCORE; when the answer's words are all
    # common among the lines read (one error repeated in a log), the lines closest to the best one do.
    threshold = min(MIN_LINE_SCORE, max(scores.values(), default=0.0) / 2)
    chosen = {key: score for key, score in scores.items() if score > 0 and score >= threshold}
    if not chosen:
        return _whole_ranges(documents, uses, limit)
    spans: list[tuple[float, int, int, int]] = []  # score, document, first line, last line
    for doc, line in sorted(chosen):
        score = chosen[(doc, line)]
        if spans and spans[-1][1] == doc and line - spans[-1][3] <= MERGE_GAP + 1:
            previous = spans[-1]
            spans[-1] = (previous[0] + score, doc, previous[2], line)
        else:
            spans.append((score, doc, line, line))
    spans.sort(key=lambda s: (-s[0], s[1], s[2]))
    return [_source(documents, starts_of, doc, first, last) for _, doc, first, last in spans[:limit]]


def _source(
    documents: Sequence[tuple[str, str]], starts_of: dict[int, list[int]], doc: int, first: int, last: int
) -> Source:
    path, text = documents[doc]
    starts = starts_of[doc]
    begin = starts[first]
    end = starts[last + 1] - 1 if last + 1 < len(starts) else len(text)
    return Source(path, first + 1, last + 1, end - begin, _excerpt(text[begin:end]))


def _whole_ranges(documents: Sequence[tuple[str, str]], uses: Sequence[DocumentUse], limit: int) -> list[Source]:
    ranges = sorted(((end - start, use.index, start, end) for use in uses for start, end in use.ranges), reverse=True)
    sources = []
    starts_of: dict[int, list[int]] = {}
    for _, doc, start, end in ranges[:limit]:
        starts = starts_of.setdefault(doc, line_starts(documents[doc][1]))
        sources.append(_source(documents, starts_of, doc, line_of(starts, start), line_of(starts, max(start, end - 1))))
    return sources


class SourceTracker:
    """Collects what reached a model during one run; `sources` turns it into cited sources afterwards.

    Subscribe `on_event` to the run (``callbacks=[tracker.on_event]``), then call `sources` (or
    `asources`, which does the matching in a worker thread).

    Args:
        context: The run's context.
        max_output_chars: The run's ``max_output_chars`` (how much of a cell's output the root model saw).
        text_name: The path given to a plain string context.
    """

    def __init__(self, context: Any, *, max_output_chars: int = 10_000, text_name: str = "context") -> None:
        self.documents = documents_of(context, text_name)
        self._tracker = ProvenanceTracker(max_output_chars=max_output_chars)
        self._index: DocumentIndex | None = None
        self._building: asyncio.Task[DocumentIndex | None] | None = None
        self.note: str | None = None  # why there are no sources, when they were not computed
        size = sum(len(text) for _, text in self.documents)
        if size > MAX_INDEXED_CHARS:
            self.note = f"sources are not computed for inputs over {MAX_INDEXED_CHARS:,} characters ({size:,} here)"

    def on_event(self, event: Event) -> None:
        """The run's callback."""
        self._tracker.on_event(event)

    def start(self) -> None:
        """Build the index in a worker thread while the run works (call from the run's event loop).

        `asources` awaits it; `cancel` stops waiting for it when the run is abandoned.
        """
        if self._building is None and self._indexable():
            self._building = asyncio.ensure_future(asyncio.to_thread(self._build))

    def cancel(self) -> None:
        """Stop waiting for an index started by `start` (its thread finishes on its own)."""
        if self._building is not None:
            self._building.cancel()

    def _indexable(self) -> bool:
        return bool(self.documents) and self.note is None

    def _build(self) -> DocumentIndex | None:
        if self._index is None and self._indexable():
            self._index = DocumentIndex([text for _, text in self.documents], [path for path, _ in self.documents])
        return self._index

    def sources(self, answer: str, *, limit: int = MAX_SOURCES) -> list[Source]:
        """The cited sources of `answer` (empty, with `note` saying why, when the input is too large to index)."""
        if self._tracker.empty:
            return []  # nothing reached a model: no index needed
        index = self._build()
        return [] if index is None else cite(self.documents, self._tracker.resolve(index), answer, limit=limit)

    async def asources(self, answer: str, *, limit: int = MAX_SOURCES) -> list[Source]:
        """`sources` in a worker thread, so a large input does not stall the event loop.

        Sources are an addition to the answer: a failure to compute them is logged and noted in `note`,
        never raised into the caller's run.
        """
        try:
            if self._building is not None:
                await self._building
            return await asyncio.to_thread(self.sources, answer, limit=limit)
        except Exception as exc:
            logger.warning("could not compute the sources of a run", exc_info=True)
            self.note = f"sources could not be computed: {type(exc).__name__}: {exc}"
            return []


def sources_block(sources: Sequence[Source]) -> str:
    """The ``Sources:`` block that ends a text answer: one ``path:start-end`` per line."""
    if not sources:
        return ""
    return "Sources:\n" + "\n".join(f"- {source.location}" for source in sources)
