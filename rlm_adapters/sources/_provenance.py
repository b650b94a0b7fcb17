"""Which documents a run actually used, and which character ranges of each.

A document counts as used when its text crossed the sandbox boundary towards a model: it was part of a
sub-call prompt whose request was really sent (`SubCallSent`: a call the budget refused reached no model),
of the preview of a context a root model was shown (`RunStarted`), of a nested run's query, or of what a
cell printed back to a root model (`CellExecuted.output`, cut as the loop cuts it). These are the exact
texts the host saw, for every sandbox kind, so nothing is guessed from the answer.

Each text is matched as it arrives, on a worker thread (`start`), and then let go: a long one through
anchors (`_anchors`: long runs), and what anchors did not cover is kept as short blocks. Long texts that add
up to less than a quarter of the input wait for one scan of it with their own anchors (done when the run's
findings wait for them, or when 4 MB wait); past that share, the input's anchor index is built and finds
them (or is used at once when the caller keeps one, as `RLMQueryEngine` does). At the end (`resolve`) the
blocks are matched with needles (`_needles`: one pass over the input, any run long enough to tell). Text a
model saw only after code rewrote it (translated, reworded, re-cased) is not found; a document under five
words is never matched.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, cast

from rlm_adapters.core import CellExecuted, Event, RunStarted, SubCallFinished, SubCallSent, SubCallStarted
from rlm_adapters.core.adapter_kit import truncate_output
from rlm_adapters.sources._anchors import MAX_PLACES, AnchorIndex, Run, probe_anchors, seeded_runs
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._needles import Block, counts, match
from rlm_adapters.sources._scan import scan
from rlm_adapters.sources._text import unescape

logger = logging.getLogger("rlm_adapters.sources")
ProbeKind = Literal["sub_call", "printed", "preview"]
# Texts go through the anchors first once one is this long or all together are this much (before, matching
# them at the end costs less than finding anchors); shorter ones never do.
LONG_PROBE = 64 * 1024
LONG_TOTAL = 1 << 20
ANCHORED_PROBE = 2048
SCAN_SHARE = 4  # long texts are found by scans until they add up to a quarter of the input; then by its index
SCAN_BATCH = 4 << 20  # a scan for this much waiting text at most (about 2,000 anchors: a fast automaton)
MAX_ANCHOR_CHARS = 48  # a longer anchor is looked for by its beginning
# A scan finds an anchor anywhere (not only where the input's own segments start), so an anchor every 8,000
# characters seeds any run twice that long, wherever it was cut; shorter ones are left to the needles. Fewer
# patterns: an automaton of 400 scans 200 MB in about two thirds of the time of one of 1,300.
SCAN_EVERY = 8192
MAX_BLOCKS_CHARS = 64 << 20  # what anchors could not match is kept up to this much
_STOP = object()
# A run may start with the last few characters of the line before (a prompt that shares its "t.\n") or end
# with the first few of the next (a "- " bullet): that many characters of a line or fewer are not a use of it.
MAX_STRAY = 8
ALL_KINDS = frozenset[ProbeKind]({"sub_call", "printed", "preview"})


@dataclass
class DocumentUse:
    """How one document was used by a run.

    Attributes:
        index: Its position in the document list.
        doc_id: Its id (its path).
        ranges: Merged ``(start, end)`` character ranges of its text that reached a model, sorted.
        sub_calls: How many sub-call prompts (and nested queries) sent held part of it.
        printed: How many cell outputs shown to a root model held part of it.
        previewed: How many context previews shown to a root model held part of it.
    """

    index: int
    doc_id: str
    ranges: list[tuple[int, int]] = field(default_factory=list)
    sub_calls: int = 0
    printed: int = 0
    previewed: int = 0

    @property
    def chars(self) -> int:
        """Characters of the document covered by `ranges`."""
        return sum(end - start for start, end in self.ranges)


class ProvenanceTracker:
    """Collects the texts of one run that reached a model and matches them to the documents.

    Subscribe `on_event` to the run's events; `start` matches each text on a worker thread as it arrives
    (without it, everything is matched by `wait`). After the run, `wait` (blocking: call it in a thread),
    then `resolve`.

    Args:
        documents: The corpus.
        max_output_chars: The run's ``max_output_chars``: only that much of a cell's output (head and
            tail) was shown to the root model.
        anchors: Gives the corpus's anchor index (built on first use, maybe shared between runs).
    """

    def __init__(
        self,
        documents: Sequence[Document],
        *,
        max_output_chars: int = 10_000,
        anchors: Callable[[], AnchorIndex] | None = None,
        indexed: Callable[[], bool] | None = None,
    ) -> None:
        self.documents = documents
        self.max_output_chars = max_output_chars
        self._anchors = anchors or _lazy(documents)
        self._indexed = indexed or (lambda: False)
        # Long texts are found by scans of the input (their own anchors, one pass for many texts) until they add
        # up to a share of it; past that, building the index of the input's anchors costs less.
        self._scan_budget = sum(len(document.text) for document in documents) // SCAN_SHARE
        self._scanned = 0
        self._by_index = False
        self._waiting: list[tuple[str, int, bool]] = []  # long texts for the next scan: (text, probe, escaped)
        self._waiting_chars = 0
        self._pending: dict[str, str] = {}  # call id -> prompt, until the request is sent
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._control = threading.Lock()  # orders a stop against a wait's marker in the queue
        self._stopped = False
        self._seen: dict[int, int] = {}  # hash of a text -> its probe
        self._kinds: list[dict[ProbeKind, int]] = []  # per probe: how often it reached a model, by kind
        self._runs: list[tuple[int, Run]] = []  # (probe, run) from anchors
        self.blocks: list[Block] = []
        self._block_of: dict[int, int] = {}  # hash of a block's text -> its index
        self._blocks_chars = 0
        self.unmatched_chars = 0  # text beyond MAX_BLOCKS_CHARS, never matched
        self.failure: str | None = None
        self._all: list[tuple[int, Run]] | None = None
        self._volume = 0  # characters of text matched so far
        self._anchored = False  # texts go through the anchor index

    # -- collecting (the run's loop) ------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """Take the text of an event that reached a model (cheap: the matching happens elsewhere)."""
        if isinstance(event, SubCallStarted):
            if event.call_kind != "tool":
                self._pending[event.call_id] = event.prompt
        elif isinstance(event, SubCallSent):
            prompt = self._pending.pop(event.call_id, None)
            if prompt is not None:
                self._put(prompt, "sub_call")
        elif isinstance(event, SubCallFinished):
            self._pending.pop(event.call_id, None)  # never sent: the budget or a cancellation stopped it
        elif isinstance(event, CellExecuted) and not event.final:
            # A cell that ended the run sent nothing back; the others were cut like the loop cuts them.
            shown = truncate_output(event.output, self.max_output_chars)
            if event.error:
                shown = f"{shown}\n{truncate_output(event.error, self.max_output_chars)}"
            self._put(shown, "printed")
        elif isinstance(event, RunStarted):
            preview = event.context_description.get("preview")
            if isinstance(preview, str):
                self._put(preview, "preview")
            if event.depth > 0 and event.query:
                self._put(event.query, "sub_call")

    def _put(self, text: str, kind: ProbeKind) -> None:
        if text.strip():
            self._queue.put((text, kind))

    @property
    def empty(self) -> bool:
        """No text has reached a model yet (or none was matched)."""
        return not self._kinds and self._queue.empty()

    # -- matching (a worker thread) -------------------------------------------------------------------
    def start(self) -> None:
        """Match texts on a worker thread as they arrive (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="rlm-sources", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Let the worker thread end after the text it is matching (the run was abandoned)."""
        with self._control:
            if self._thread is not None and not self._stopped:
                self._stopped = True
                self._queue.put(_STOP)

    def wait(self, halt: threading.Event | None = None) -> bool:
        """Block until every text collected so far is matched (matching them here without a worker).

        Args:
            halt: Stop waiting once it is set (the caller gave up on the sources).

        Returns:
            Whether everything was matched (False: `halt` came first).
        """
        with self._control:
            thread, stopped = self._thread, self._stopped
            if thread is not None and not stopped:
                # Queued before any stop can be: the worker reaches it before it could end.
                done = threading.Event()
                self._queue.put(done)
        if thread is not None and not stopped:
            return _until(done.wait, halt)
        # A marker queued behind the stop would never be reached: let the worker end, then match what it left
        # here (a wait after `findings` stopped it, as `uses` is).
        if thread is not None and not _until(partial(_joined, thread), halt):
            return False
        return self._drain(halt)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._handle(item)

    def _drain(self, halt: threading.Event | None = None) -> bool:
        while halt is None or not halt.is_set():
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                self._guarded(self._flush)
                return True
            if item is not _STOP:
                self._handle(item)
        return False

    def _handle(self, item: object) -> None:
        if isinstance(item, threading.Event):
            self._guarded(self._flush)  # a wait: what waits for a scan is matched now
            item.set()
            return
        text, kind = cast(tuple[str, ProbeKind], item)
        self._guarded(partial(self._match, text, kind))

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # sources are an addition to the answer: note it, never fail the run
            logger.warning("could not match a text that reached a model", exc_info=True)
            self.failure = f"{type(exc).__name__}: {exc}"

    def _match(self, text: str, kind: ProbeKind) -> None:
        key = hash(text)
        probe = self._seen.get(key)
        if probe is not None:
            self._kinds[probe][kind] = self._kinds[probe].get(kind, 0) + 1
            return
        probe = self._seen[key] = len(self._kinds)
        self._kinds.append({kind: 1})
        self._all = None
        self._volume += len(text)
        if not self._anchored and (len(text) >= LONG_PROBE or self._volume >= LONG_TOTAL):
            self._anchored = True
            # What was kept whole until now goes through the anchors too: the end then matches less.
            kept, self.blocks, self._block_of, self._blocks_chars = self.blocks, [], {}, 0
            for block in kept:
                for owner in block.probes:
                    self._split(block.text, owner)
        self._split(text, probe, escaped=True)

    def _split(self, text: str, probe: int, *, escaped: bool = False) -> None:
        """Match `text` of `probe` through the anchors (once they are in use) and keep what they left.

        With `escaped`, the text is also tried with its escapes undone (a printed repr, JSON): all of it when
        its escapes lie where the anchors found nothing, else only what they left. Source code sent as it is holds
        ``"\\n"`` too, and undone whole, a chunk of it matched nothing and went to the needles (0.5 MB of
        them for 3 MB of code sent: seconds at the end of a run).
        """
        runs: list[Run] = []
        if self._anchored and len(text) >= ANCHORED_PROBE:
            if self._scanning(len(text)):
                self._waiting.append((text, probe, escaped))
                self._waiting_chars += len(text)
                if self._waiting_chars >= SCAN_BATCH:
                    self._flush()
                return
            runs = [run for run in self._anchors().runs(text) if counts(self.documents, run, text)]
        self._rests(text, probe, escaped, runs)

    def _scanning(self, size: int) -> bool:
        """Whether a long text waits for a scan (else the index finds it: kept by the caller, or cheaper now)."""
        if self._by_index or self._indexed():
            return False
        self._scanned += size
        if self._scanned <= self._scan_budget:
            return True
        self._by_index = True  # the texts read add up to much of the input: its index pays for itself
        waiting, self._waiting, self._waiting_chars = self._waiting, [], 0
        for text, probe, escaped in waiting:
            self._split(text, probe, escaped=escaped)
        return False

    def _flush(self) -> None:
        """Match the long texts waiting for a scan: their own anchors, found in the input in one pass."""
        while self._waiting:
            waiting, self._waiting, self._waiting_chars = self._waiting, [], 0
            seeds: list[list[tuple[int, list[tuple[int, int]]]]] = [[] for _ in waiting]
            anchors: dict[str, list[tuple[int, int]]] = {}  # anchor -> (waiting text, offset in it)
            for number, (text, _, _) in enumerate(waiting):
                for at, segment in probe_anchors(text, SCAN_EVERY):
                    # Short and of Latin-1 letters: a small automaton over one byte a character scans fastest
                    # (one anchor of a run is enough to find it; what none seeds is left to the needles).
                    anchor = segment[:MAX_ANCHOR_CHARS]
                    if max(anchor) < "\u0100":
                        anchors.setdefault(anchor, []).append((number, at))
            patterns = list(anchors)
            places: list[list[tuple[int, int]]] = [[] for _ in patterns]
            ranges = ((doc, document.text, 0, len(document.text)) for doc, document in enumerate(self.documents))
            for which, doc, offset in scan(ranges, patterns, cap=MAX_PLACES + 1):
                places[which].append((doc, offset))
            for which, pattern in enumerate(patterns):
                if len(places[which]) <= MAX_PLACES:  # found in more places, it is boilerplate: it seeds nothing
                    for number, at in anchors[pattern]:
                        seeds[number].append((at, places[which]))
            for number, (text, probe, escaped) in enumerate(waiting):
                found = seeded_runs(self.documents, text, sorted(seeds[number], key=lambda seed: seed[0]))
                self._rests(text, probe, escaped, [run for run in found if counts(self.documents, run, text)])
            self._all = None

    def _rests(self, text: str, probe: int, escaped: bool, runs: list[Run]) -> None:
        """Record the runs found in `text` and keep (or match undone) what they left."""
        self._runs.extend((probe, run) for run in runs)
        rest, at = [], 0
        for run in sorted(runs, key=lambda r: r.start):
            rest.append(text[at : run.start])
            at = max(at, run.end)
        rest.append(text[at:] if at else text)
        plain = unescape(text) if escaped else None
        # Escapes the document holds too (code sent as it is) lie inside the runs found; escapes made by a
        # repr or JSON lie between them, where the document has the characters they stand for.
        whole = plain is not None and 2 * sum(piece.count("\\") for piece in rest) > text.count("\\")
        for piece in rest:
            self._rest(piece, probe, escaped and not whole)
        if whole and plain is not None:
            self._split(plain, probe)

    def _rest(self, text: str, probe: int, escaped: bool) -> None:
        """Keep what anchors left of a text (and with `escaped`, match it with its escapes undone)."""
        self._keep(text, probe)
        plain = unescape(text) if escaped else None
        if plain is not None:
            self._split(plain, probe)

    def _keep(self, text: str, probe: int) -> None:
        # Short texts are kept too: too short to say where they came from, they still count for claims.
        if not text or text.isspace():
            return
        key = hash(text)
        known = self._block_of.get(key)
        if known is not None and self.blocks[known].text == text:
            if self.blocks[known].probes[-1] != probe:
                self.blocks[known].probes.append(probe)
            return
        if self._blocks_chars + len(text) > MAX_BLOCKS_CHARS:
            self.unmatched_chars += len(text)
            return
        self._blocks_chars += len(text)
        self._block_of[key] = len(self.blocks)
        self.blocks.append(Block(text, [probe]))

    # -- results --------------------------------------------------------------------------------------
    def resolve(
        self,
        *,
        windows: Sequence[Sequence[tuple[int, int]]] | None = None,
        kinds: frozenset[ProbeKind] = ALL_KINDS,
    ) -> list[DocumentUse]:
        """The documents used so far, in document order, each with merged character ranges.

        Args:
            windows: Per block, the stretches worth matching (`_needles.match`); None matches all of them.
            kinds: Count only texts that reached a model this way (a preview is not a document chosen).
        """
        return self.resolve_with(windows=windows, kinds=kinds)[0]

    def resolve_with(
        self,
        *,
        windows: Sequence[Sequence[tuple[int, int]]] | None = None,
        kinds: frozenset[ProbeKind] = ALL_KINDS,
        extra: Sequence[str] = (),
        extra_cap: int = 4,
    ) -> tuple[list[DocumentUse], list[list[tuple[int, int]]]]:
        """`resolve`, also finding `extra` strings anywhere in the documents in the same pass.

        Returns:
            The documents used, and per `extra` string its first `extra_cap` places in the documents.
        """
        (uses,), places = self.resolve_kinds((kinds,), windows=windows, extra=extra, extra_cap=extra_cap)
        return uses, places

    def resolve_kinds(
        self,
        kinds: Sequence[frozenset[ProbeKind]],
        *,
        windows: Sequence[Sequence[tuple[int, int]]] | None = None,
        extra: Sequence[str] = (),
        extra_cap: int = 4,
    ) -> tuple[list[list[DocumentUse]], list[list[tuple[int, int]]]]:
        """`resolve_with` for several sets of kinds at once, from one pass of the matcher.

        Returns:
            The documents used by texts of each set of `kinds`, and per `extra` string its first places.
        """
        places: list[list[tuple[int, int]]] = []
        if windows is None and not extra and self._all is not None:
            found = self._all
        else:
            found, places = match(self.documents, self.blocks, windows, extra, extra_cap)
            if windows is None and not extra:
                self._all = found
        runs = [*self._runs, *((probe, run) for number, run in found for probe in self.blocks[number].probes)]
        return [uses_of(self.documents, runs, self._kinds, wanted) for wanted in kinds], places


def uses_of(
    documents: Sequence[Document],
    runs: Sequence[tuple[int, Run]],
    probe_kinds: Sequence[dict[ProbeKind, int]],
    kinds: frozenset[ProbeKind],
) -> list[DocumentUse]:
    """Runs (per probe) as merged ranges and counts per document, for the probes of `kinds` only."""
    spans: dict[int, list[tuple[int, int]]] = {}
    probes: dict[int, set[int]] = {}
    for probe, run in runs:
        if not any(kind in kinds for kind in probe_kinds[probe]):
            continue
        start, end = trimmed(documents[run.doc].text, run.doc_start, run.doc_start + run.length)
        if start < end:
            spans.setdefault(run.doc, []).append((start, end))
        probes.setdefault(run.doc, set()).add(probe)
    uses: list[DocumentUse] = []
    for doc in sorted(spans):
        merged: list[list[int]] = []
        for start, end in sorted(spans[doc]):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        use = DocumentUse(doc, documents[doc].path, [(start, end) for start, end in merged])
        for probe in probes[doc]:
            tally = probe_kinds[probe]
            use.sub_calls += tally.get("sub_call", 0) if "sub_call" in kinds else 0
            use.printed += tally.get("printed", 0) if "printed" in kinds else 0
            use.previewed += tally.get("preview", 0) if "preview" in kinds else 0
        uses.append(use)
    return uses


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``start..end`` without a stray edge: the few last characters of the line before, or first of the next.

    A run of the matcher is maximal, so a prompt that quotes a line after its own line ending like the one
    before it (in ".\n", "t.\n") matches from there: it would cite the line before as used.
    """
    if start > 0 and text[start - 1] != "\n":
        newline = text.find("\n", start, min(end, start + MAX_STRAY + 1))
        if newline >= 0:
            start = newline + 1
    if end < len(text) and text[end] != "\n" and start < end:
        newline = text.rfind("\n", max(start, end - MAX_STRAY - 1), end)
        if newline >= 0:
            end = newline
    return max(start, 0), max(end, start)


def _joined(thread: threading.Thread, seconds: float | None) -> bool:
    thread.join(seconds)
    return not thread.is_alive()


def _until(wait: Callable[[float | None], bool], halt: threading.Event | None) -> bool:
    """``wait(None)``, or without it, ``wait`` a tenth of a second at a time until it is done or `halt` is set."""
    if halt is None:
        return wait(None)
    while not wait(0.1):
        if halt.is_set():
            return False
    return True


def _lazy(documents: Sequence[Document]) -> Callable[[], AnchorIndex]:
    built: list[AnchorIndex] = []

    def index() -> AnchorIndex:
        if not built:
            built.append(AnchorIndex(documents))
        return built[0]

    return index
