"""Short runs of the input inside what reached a model: needles from the text, one pass over the input.

What anchors did not cover (printed grep hits, a line inside an instruction, a repr of a dict, a regex
group) is cut into pieces at line ends, sentence ends and the quotes and brackets of a repr; each piece
gives a few needles (its start, middle and end), and one Aho–Corasick pass over the whole input finds
them all. Each hit is grown character by character to the run the piece and the document share; the
longest run through a place wins, shared boilerplate goes to no document, and a run counts only when it
is long enough to tell where it came from (`counts`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rlm_adapters.sources._anchors import MAX_PLACES, Diagonals, Run, pick
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._scan import scan
from rlm_adapters.sources._text import tokens

NEEDLE = 24
MIN_PIECE = 20
LONG_STEP = 1024  # a long piece also gives a needle this often
MIN_TOKENS = 6  # a run shorter than this many words (and than MIN_RUN characters) tells nothing...
MIN_RUN = 24
MIN_WHOLE_TOKENS = 5  # ...unless it is a whole document of at least this many
_BREAK = re.compile(r"\n|[.:;?!]\s+|(?:['\"`\[\]{}][,:\s]*)+")


@dataclass(frozen=True)
class Block:
    """A stretch of text that reached a model and that anchors did not match.

    Attributes:
        text: The text.
        probes: The probes (texts that reached a model) it is part of: the same instruction sent with
            every document is kept once.
    """

    text: str
    probes: list[int]


def pieces(text: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of the pieces of ``text[start:end]`` between breaks, without edge whitespace."""
    stop = len(text) if end is None else min(end, len(text))
    at = start
    for match in _BREAK.finditer(text, start, stop):
        yield from _stripped(text, at, match.start())
        at = match.end()
    yield from _stripped(text, at, stop)


def _stripped(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if end - start >= MIN_PIECE:
        yield start, end


def needles(text: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, str]]:
    """``(offset, needle)`` of the pieces of ``text[start:end]``."""
    for begin, stop in pieces(text, start, end):
        if stop - begin <= NEEDLE:
            yield begin, text[begin:stop]
            continue
        offsets = {
            begin,
            (begin + stop - NEEDLE) // 2,
            stop - NEEDLE,
            *range(begin + LONG_STEP, stop - NEEDLE, LONG_STEP),
        }
        for offset in sorted(offsets):
            yield offset, text[offset : offset + NEEDLE]


def counts(documents: Sequence[Document], run: Run, text: str) -> bool:
    """Whether `run` (of `text`) is long enough to say it came from its document."""
    length = run.length
    document = documents[run.doc].text
    whole = run.doc_start == 0 and length == len(document)
    if length >= 8 * MIN_RUN:
        return True
    words = tokens(text[run.start : run.end])
    # A word the run cuts at either end ("he" of "The") is not one the two texts share.
    end = run.doc_start + length
    words -= run.doc_start > 0 and document[run.doc_start - 1].isalnum() and document[run.doc_start].isalnum()
    words -= end < len(document) and document[end].isalnum() and document[end - 1].isalnum()
    return (words >= MIN_TOKENS and length >= MIN_RUN) or (whole and words >= MIN_WHOLE_TOKENS)


def match(
    documents: Sequence[Document],
    blocks: Sequence[Block],
    windows: Sequence[Sequence[tuple[int, int]]] | None = None,
    extra: Sequence[str] = (),
    extra_cap: int = MAX_PLACES,
) -> tuple[list[tuple[int, Run]], list[list[tuple[int, int]]]]:
    """The runs of documents in `blocks`, found with one pass over the documents.

    Args:
        documents: The corpus.
        blocks: What anchors did not match.
        windows: Per block, the ``(start, end)`` stretches worth matching (None: all of each block).
        extra: More strings to find in the documents in the same pass (an answer's exact claims).
        extra_cap: Report at most this many places of each of them.

    Returns:
        ``(block index, run)`` for every run that `counts`, in block order; and per `extra` string, the
        ``(document, offset)`` places where it was found (case and all, in text order).
    """
    where: dict[str, list[tuple[int, int]]] = {}  # needle -> (block, offset)
    for number, block in enumerate(blocks):
        spans = [(0, len(block.text))] if windows is None else windows[number]
        for start, end in spans:
            for offset, needle in needles(block.text, start, end):
                where.setdefault(needle, []).append((number, offset))
    extra_places: list[list[tuple[int, int]]] = [[] for _ in extra]
    if not where and not extra:
        return [], extra_places
    patterns = list(where)
    places: dict[int, list[tuple[int, int]]] = {}
    for which, doc, offset in scan(
        ((doc, document.text, 0, len(document.text)) for doc, document in enumerate(documents)),
        [*patterns, *extra],
        cap=max(MAX_PLACES, extra_cap),
    ):
        if which >= len(patterns):
            found = extra_places[which - len(patterns)]
            if len(found) < extra_cap:
                found.append((doc, offset))
        else:
            places.setdefault(which, []).append((doc, offset))
    seeds: dict[int, list[tuple[int, list[tuple[int, int]]]]] = {}
    for which, found in places.items():
        if len(found) > MAX_PLACES - 1:
            continue  # boilerplate: it cannot say which document a piece came from
        for number, offset in where[patterns[which]]:
            seeds.setdefault(number, []).append((offset, found))
    runs: list[tuple[int, Run]] = []
    for number in sorted(seeds):
        text = blocks[number].text
        covered = 0
        grown = Diagonals(documents, text)
        for offset, found in sorted(seeds[number], key=lambda seed: seed[0]):
            if offset < covered:
                continue
            best = pick(documents, [grown.run(offset, doc, at) for doc, at in found])
            best = [run for run in best if counts(documents, run, text)]
            if best:
                runs.extend((number, run) for run in best)
                covered = max(run.end for run in best)
    return runs, extra_places
