"""Long runs of the input inside a long text that reached a model, found through a sparse anchor index.

The input's text is cut into segments (lines; prose lines also at sentence ends) and about one segment in
`SPARSITY` becomes an anchor, chosen by its checksum, so the same text makes the same anchors wherever it
is: in a document and in a prompt that holds a slice of it. A long prompt is cut the same way; each of its
segments that is an anchor seeds a match, which is grown character by character (slice comparisons) to the
longest run the prompt and the document share. Splitting, hashing and looking up run over whole slices
in C (``str.split``, ``map(crc32, ...)``, ``dict.__contains__``); Python only touches the anchors.

A run shorter than about ``3 * SPARSITY`` segments may hold no anchor: what anchors do not cover is
matched later by `rlm_adapters.sources._needles`, which finds any run, so anchors only make long prompts
cheap (one pass, nothing kept of them but what they did not cover).

The index costs a pass over the whole input that hashes every segment (seconds at 200 MB). While the long
texts that reached a model add up to less than a share of the input, `_provenance` finds them the other way
round: their own anchors (`probe_anchors`: one every 8,000 characters, wherever they were cut) found in the
input by one scan (`_scan`), their runs grown as the index's are (`seeded_runs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate, compress
from operator import and_, not_
from zlib import crc32

from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._text import backward, forward, slices

SPARSITY = 32  # one segment in this many is an anchor
MIN_ANCHOR = 16  # shorter segments ("}", "return x") are too common to seed anything
MAX_PLACES = 32  # an anchor found in more places than this is boilerplate: it seeds nothing
SLICE = 4 << 20
_PICK = partial(and_, SPARSITY - 1)
# Which segments are anchors is decided by a checksum, the same in every process (str's hash is not): the same
# input makes the same anchors, so what is cited does not change from one run to the next.
_BYTES = partial(str.encode, encoding="utf-8", errors="surrogatepass")
_COMMON = -1
_SHIFT = 40  # anchor entries pack (document << _SHIFT) | offset


def segments(text: str) -> list[str]:
    """`text` cut into anchor segments: lines, and prose lines at each ". " (lengths are kept)."""
    return text.replace(". ", ".\n").split("\n")


@dataclass(frozen=True)
class Run:
    """A stretch of a probe text equal to a stretch of a document.

    Attributes:
        start: Where it starts in the probe.
        end: Where it ends in the probe.
        doc: The document's index.
        doc_start: Where it starts in the document.
    """

    start: int
    end: int
    doc: int
    doc_start: int

    @property
    def length(self) -> int:
        """Its length in characters."""
        return self.end - self.start


class AnchorIndex:
    """The anchors of a corpus: segment hash -> where in which document (built once, in one pass).

    Args:
        documents: The corpus.
    """

    def __init__(self, documents: Sequence[Document]) -> None:
        self.documents = documents
        self._anchors: dict[int, int | list[int]] = {}
        for number, document in enumerate(documents):
            for start, end in slices(document.text, SLICE):
                self._add(number, document.text[start:end], start)

    def _add(self, doc: int, text: str, base: int) -> None:
        parts = segments(text)
        ends = list(accumulate(map(len, parts)))
        picked = compress(range(len(parts)), map(not_, map(_PICK, map(crc32, map(_BYTES, parts)))))
        # A document's first segment is always an anchor: a short document sent whole is then found.
        for i in sorted({0, *picked}) if base == 0 else picked:
            if len(parts[i]) < MIN_ANCHOR:
                continue
            self._put(hash(parts[i]), (doc << _SHIFT) | (base + (ends[i - 1] if i else 0) + i))

    def _put(self, key: int, entry: int) -> None:
        anchors = self._anchors
        found = anchors.get(key)
        if found is None:
            anchors[key] = entry
        elif isinstance(found, list):
            if len(found) >= MAX_PLACES:
                anchors[key] = _COMMON
            else:
                found.append(entry)
        elif found != _COMMON:
            anchors[key] = [found, entry]

    def __len__(self) -> int:
        return len(self._anchors)

    def runs(self, probe: str) -> list[Run]:
        """The long runs of documents in `probe`, in probe order, each the longest at its place.

        A run several documents share equally is kept only for those it covers whole (`pick`).
        """
        found: list[Run] = []
        covered = 0
        anchors = self._anchors
        grown = Diagonals(self.documents, probe)
        for base, stop in slices(probe, SLICE):
            parts = segments(probe[base:stop])
            ends = list(accumulate(map(len, parts)))
            for i in compress(range(len(parts)), map(anchors.__contains__, map(hash, parts))):
                at = base + (ends[i - 1] if i else 0) + i
                if at < covered:
                    continue
                entry = anchors[hash(parts[i])]
                if entry == _COMMON:
                    continue
                best = longest(grown, at, entry if isinstance(entry, list) else [entry])
                if best:
                    found.extend(best)
                    covered = max(run.end for run in best)
        return found


def probe_anchors(probe: str, every: int) -> list[tuple[int, str]]:
    """``(offset, segment)``: in each stretch of `every` characters of a probe, its first segment long enough to
    seed (`MIN_ANCHOR`). Found in the documents by a scan (anywhere, not only where their own segments start),
    they seed runs without an index of the whole input; a run twice `every` long holds one."""
    found: list[tuple[int, str]] = []
    for base, stop in slices(probe, SLICE):
        parts = segments(probe[base:stop])
        at, window = base, -1
        for part in parts:
            if len(part) >= MIN_ANCHOR and at // every > window:
                found.append((at, part))
                window = at // every
            at += len(part) + 1
    return found


def seeded_runs(documents: Sequence[Document], probe: str, seeds: list[tuple[int, list[tuple[int, int]]]]) -> list[Run]:
    """The runs `seeds` give in `probe` (``(offset, [(document, offset), ...])`` in probe order), each the longest
    at its place, as `AnchorIndex.runs` finds them."""
    found: list[Run] = []
    covered = 0
    grown = Diagonals(documents, probe)
    for at, places in seeds:
        if at < covered:
            continue
        best = pick(documents, [run for run in (grown.run(at, doc, offset) for doc, offset in places) if run.length])
        if best:
            found.extend(best)
            covered = max(run.end for run in best)
    return found


class Diagonals:
    """The runs a probe shares with documents, grown once per diagonal (a probe offset against a document's).

    A run is the longest stretch around a place where probe and document are equal, so every place inside it
    on the same diagonal (probe offset ``p`` against document offset ``p + d``) has the same run. Text found at
    several places (a changelog two packages share, a file holding its text twice) gives many seeds on the
    same few diagonals: grown from each seed, the same run was compared again and again, quadratic in its
    length; kept per diagonal, each run is compared once.

    Args:
        documents: The corpus.
        probe: The text that reached a model.
    """

    def __init__(self, documents: Sequence[Document], probe: str) -> None:
        self.documents = documents
        self.probe = probe
        self._last: dict[tuple[int, int], Run] = {}  # (document, diagonal) -> the last run grown on it

    def run(self, at: int, doc: int, offset: int) -> Run:
        """The run through probe offset `at` and document `doc`'s `offset` (empty when they differ there)."""
        key = (doc, offset - at)
        known = self._last.get(key)
        if known is not None and known.start <= at < known.end:
            return known
        text = self.documents[doc].text
        right = forward(self.probe, at, text, offset)
        if right == 0:
            return Run(at, at, doc, offset)  # a hash collision, or a needle's first letter differs in case
        left = backward(self.probe, at, text, offset)
        run = self._last[key] = Run(at - left, at + right, doc, offset - left)
        return run


def longest(grown: Diagonals, at: int, entries: list[int]) -> list[Run]:
    """The longest run through probe offset `at` among candidate document offsets (packed entries).

    Returns what `pick` keeps of the runs through that place.
    """
    runs: list[Run] = []
    for entry in entries:
        run = grown.run(at, entry >> _SHIFT, entry & ((1 << _SHIFT) - 1))
        if run.length:
            runs.append(run)
    return pick(grown.documents, runs)


def pick(documents: Sequence[Document], runs: list[Run]) -> list[Run]:
    """Of runs through one place, the longest one; when several tie, only those covering a whole document
    (duplicates): text several documents share says nothing of which one was read. Text that stands
    twice in one document only (a log that repeats a stretch, a file made of its text twice) is that
    document's all the same: its first place is kept, or nothing of a one-line input would ever be cited."""
    if not runs:
        return []
    top = max(run.length for run in runs)
    best = {(run.doc, run.doc_start): run for run in runs if run.length == top}
    if len(best) == 1:
        return list(best.values())
    if len({doc for doc, _ in best}) == 1:
        return [best[min(best)]]
    return [run for run in best.values() if run.doc_start == 0 and run.length == len(documents[run.doc].text)]
