"""`SourceTracker`: the one tracker every adapter uses for a run's sources, claims and documents read.

Subscribe `on_event` to the run, call `start` from the run's loop (texts are matched on a worker thread
as they reach a model), and after the run `await apply(result)`: it sets ``result.sources``,
``result.claims`` and ``result.sources_note`` and appends them to the run's trajectory log. `uses` gives
the documents and character ranges read (`RLMQueryEngine`'s source nodes). Nothing here raises into the
caller's run: a failure becomes the note.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from rlm_adapters.core import Claim, Event, Observer, RLMResult, Source
from rlm_adapters.core.adapter_kit import SOURCES_RECORD, append_record
from rlm_adapters.sources._anchors import AnchorIndex
from rlm_adapters.sources._check import FEW_PLACES, check, exacts_of, found_in_blocks, stems_of
from rlm_adapters.sources._citations import MAX_SOURCES, UNFINISHED, choose, whole_ranges
from rlm_adapters.sources._claims import MAX_ANSWER_CHARS, MAX_CLAIMS, split, split_value
from rlm_adapters.sources._documents import Document, corpus_of
from rlm_adapters.sources._evidence import ExactKind, search_read_seen
from rlm_adapters.sources._named import file_sources, named_files
from rlm_adapters.sources._needles import MIN_WHOLE_TOKENS
from rlm_adapters.sources._provenance import MAX_BLOCKS_CHARS, DocumentUse, ProbeKind, ProvenanceTracker
from rlm_adapters.sources._scan import Halted, halting, scan
from rlm_adapters.sources._text import TOKEN
from rlm_adapters.sources._words import distinctive

logger = logging.getLogger("rlm_adapters.sources")
RELEVANT = 256  # reached text this close to an answer's word is matched to the input for its sources
NO_SHARED_WORD = "the answer shares no distinctive word with the input that reached a model"
NOTHING_REACHED = "no text reached a model: the run sent no sub-call and printed nothing"
READ = frozenset[ProbeKind]({"sub_call", "printed"})  # what a run chose to read (no automatic preview)
SEEN = frozenset[ProbeKind]({"sub_call", "printed", "preview"})  # everything a model was shown


class Corpus:
    """The documents of a context and their anchor index (built once, on first need; shareable by runs).

    Args:
        documents: The documents.
    """

    def __init__(self, documents: Sequence[Document]) -> None:
        self.documents = list(documents)
        self._index: AnchorIndex | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, context: Any, text_name: str = "context") -> Corpus:
        """The corpus of a run's context (see `rlm_adapters.sources.documents_of`)."""
        return cls(corpus_of(context, text_name))

    def indexed(self) -> bool:
        """Whether the anchor index is built (then it finds long texts for less than a scan of the input)."""
        return self._index is not None

    def anchors(self) -> AnchorIndex:
        """The anchor index, built by the first caller."""
        with self._lock:
            if self._index is None:
                self._index = AnchorIndex(self.documents)
            return self._index


@dataclass
class Findings:
    """What a run's answer rests on.

    Attributes:
        sources: The input spans that reached a model and support the answer, best first.
        claims: The answer's claims, each supported or not.
        note: Why `sources` is empty or holds only the ranges read; what was left unchecked.
    """

    sources: list[Source] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    note: str | None = None

    def record(self, run_id: str) -> dict[str, Any]:
        """The trajectory record of these findings."""
        return {
            # Not an engine event (so not type "event"), but with a kind like every record after the header.
            "type": SOURCES_RECORD,
            "kind": SOURCES_RECORD,
            "run_id": run_id,
            "time": time.time(),
            "sources": [source.to_dict() for source in self.sources],
            "claims": [claim.to_dict() for claim in self.claims],
            "note": self.note,
        }


Stage = Literal["matching", "citing", "reading", "checking", "done"]
# What a stage being cut leaves out, as the note says it.
_LEFT_OUT: dict[Stage, str] = {
    "matching": "neither sources nor claims: the texts that reached a model were still being matched",
    "citing": "neither sources nor claims: the sources were still being found",
    "checking": "the claims were not checked",
    "reading": "the documents read were not listed, nor the claims checked",
    "done": "",
}


class SourceTracker(Observer):
    """Tracks what of a context reached a model during one run; then cites, checks and reports it.

    A run observer (`rlm_adapters.core.RunObserver`): give it to the run, ``rlm.acompletion(...,
    observers=[tracker])``, and the result comes back with its ``sources``, ``claims`` and ``sources_note``
    (and the trajectory with their record). The engine gives it ``sources_timeout`` seconds once the answer
    exists: cut there, the result keeps what was finished (the sources without the claims, say) and its
    note says what was not.

    Args:
        context: The run's context.
        max_output_chars: The run's ``max_output_chars`` (how much of a cell's output the root model saw).
        text_name: The path given to a plain string context.
        corpus: The context's `Corpus`, when the caller keeps one across runs (its index is reused).
        read: Also list the documents and ranges the run read (`read_uses`, for `RLMQueryEngine`), within
            the same bound.
    """

    name = "sources"

    def __init__(
        self,
        context: Any = None,
        *,
        max_output_chars: int = 10_000,
        text_name: str = "context",
        corpus: Corpus | None = None,
        read: bool = False,
    ) -> None:
        self.corpus = corpus if corpus is not None else Corpus.of(context, text_name)
        self.documents = self.corpus.documents
        self.provenance = ProvenanceTracker(
            self.documents, max_output_chars=max_output_chars, anchors=self.corpus.anchors, indexed=self.corpus.indexed
        )
        self.note: str | None = None
        self.read = read
        self.read_uses: list[DocumentUse] | None = None  # with `read`, once listed
        self._halt = threading.Event()  # set when the engine stops waiting: the work ends at its next stage
        self._lock = threading.Lock()
        self._stage: Stage = "matching"
        self._partial = Findings()

    # -- a run observer -------------------------------------------------------------------------------
    def started(self, run_id: str) -> None:
        """The run starts: match what reaches a model on a worker thread while it works."""
        self.start()

    def event(self, event: Event) -> None:
        """One event of the run."""
        self.on_event(event)

    async def finished(self, result: RLMResult) -> None:
        """Set the result's sources, claims and note (a cancelled run's are not looked for: nobody waits)."""
        if result.finish_reason == "cancelled":
            self.cancel()
            result.sources_note = "the run was cancelled: its sources were not looked for"
            return
        await self.apply(result)

    def unfinished(self, result: RLMResult, why: str) -> None:
        """Stopped before it finished: the result keeps what was (sources before claims), the note says the rest."""
        self._halt.set()
        self.provenance.stop()
        with self._lock:
            stage, partial = self._stage, self._partial
        if stage == "done":
            return
        self.note = f"{UNFINISHED}, {why}: {_LEFT_OUT[stage]}"
        result.sources, result.claims = partial.sources, partial.claims
        result.sources_note = self.note if partial.note is None else f"{self.note}; {partial.note}"
        self._log(result, Findings(partial.sources, partial.claims, result.sources_note))

    def failed(self, error: BaseException) -> None:
        """The run failed: stop matching."""
        self.cancel()

    # -- by hand --------------------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """The run's callback."""
        self.provenance.on_event(event)

    def start(self) -> None:
        """Match what reaches a model on a worker thread while the run works (call it before the run)."""
        self.provenance.start()

    def cancel(self) -> None:
        """Stop matching: the run was abandoned."""
        self.provenance.stop()

    # -- results --------------------------------------------------------------------------------------
    def findings(self, answer: str, value: Any = None, *, limit: int = MAX_SOURCES) -> Findings:
        """The sources and claims of `answer` (blocking: may take a pass over the input).

        Args:
            answer: The run's answer text.
            value: The run's structured value (``result.final_value``), whose leaves are the claims.
            limit: At most this many sources.
        """
        self._at("matching")
        if not self.provenance.wait(self._halt):
            return self._partial
        try:
            with halting(self._halt):  # cut at its bound, the work stops at its next buffer
                found = self._findings(answer, value, limit)
        except Halted:
            return self._partial
        self.provenance.stop()
        self.note = found.note
        self._at("done", found)
        return found

    async def afindings(self, answer: str, value: Any = None, *, limit: int = MAX_SOURCES) -> Findings:
        """`findings` in a worker thread; a failure is logged and becomes the note, never raised.

        A thread of its own, not the loop's executor: ``asyncio.run`` waits for the executor's threads before it
        returns, so a command stopped while its sources were being found (Ctrl-C, ``timeout``) would still wait
        for them. Stopped, the work ends at its next stage (`unfinished`).
        """
        try:
            return await _in_thread(partial(self.findings, answer, value, limit=limit))
        except Exception as exc:
            logger.warning("could not compute the sources of a run", exc_info=True)
            self.note = f"sources could not be computed: {type(exc).__name__}: {exc}"
            self._at("done")
            return Findings(note=self.note)

    async def apply(self, result: RLMResult, *, limit: int = MAX_SOURCES) -> RLMResult:
        """Set the run's ``sources``, ``claims`` and ``sources_note``, and log them; returns `result`."""
        # A structured answer (FINAL_VAR of a dict or list) is checked leaf by leaf; a text one as text.
        value = result.final_value if isinstance(result.final_value, dict | list) else None
        found = await self.afindings(result.response, value, limit=limit)
        result.sources, result.claims, result.sources_note = found.sources, found.claims, found.note
        await asyncio.to_thread(self._log, result, found)
        return result

    def _log(self, result: RLMResult, found: Findings) -> None:
        """Put the findings in the run's trajectory (in memory and on disk)."""
        record = found.record(result.run_id)
        trajectory = result.metadata.get("trajectory")
        if isinstance(trajectory, dict):
            trajectory["sources"] = record
        if result.trajectory_file is not None:
            try:
                append_record(result.trajectory_file, record)
            except OSError:
                logger.warning("could not add the sources to %s", result.trajectory_file, exc_info=True)

    def _at(self, stage: Stage, found: Findings | None = None) -> None:
        """The work reached `stage`, with what is final so far."""
        with self._lock:
            self._stage = stage
            if found is not None:
                self._partial = found

    def sources(self, answer: str, *, limit: int = MAX_SOURCES) -> list[Source]:
        """The cited sources of `answer` (`note` says why when there are none)."""
        return self.findings(answer, limit=limit).sources

    async def asources(self, answer: str, *, limit: int = MAX_SOURCES) -> list[Source]:
        """`sources` in a worker thread; a failure is logged and noted in `note`, never raised."""
        return (await self.afindings(answer, limit=limit)).sources

    def uses(self, *, read_only: bool = True) -> list[DocumentUse]:
        """The documents and character ranges that reached a model (blocking).

        Args:
            read_only: Leave out what only the automatic preview of the context showed.
        """
        if read_only and self.read_uses is not None:
            return self.read_uses
        self.provenance.wait()
        return self.provenance.resolve(kinds=READ if read_only else SEEN)

    # -- the work -------------------------------------------------------------------------------------
    def _findings(self, answer: str, value: Any, limit: int) -> Findings:
        named = named_files(answer[:MAX_ANSWER_CHARS], self.documents)
        why = self._why_nothing(answer, bool(named))
        if why is not None:
            return Findings(note=why)
        spans = [(start, end) for _, start, end in named]
        drafts, cut = split_value(answer, value) if value is not None else split(answer, spans)
        words = distinctive(answer) if value is None else distinctive(" ".join(d.text for d in drafts))
        exacts = exacts_of(drafts)
        provenance = self.provenance
        blocks = provenance.blocks
        self._at("citing")
        (read, seen), _ = provenance.resolve_kinds(
            (READ, SEEN), windows=self._windows(words, [text for text, _ in exacts])
        )
        # Sources are what a model read for the answer (sub-calls, printed output), not what the automatic
        # preview of the context happened to show beside it; the preview counts only for a run that read
        # nothing else that supports the answer (it answered from what it was shown).
        evidence, seen_evidence = search_read_seen(self.documents, read, seen, words, exacts)
        # Only the exact claims no reached text holds are looked for in the whole input (a made-up number: a
        # str.find; ridden along the needles' pass, 45 quotes made it a pass that encodes 200 MB).
        places = self._places(exacts, seen_evidence.exact, FEW_PLACES * 8)
        sources, ranges_only = choose(self.documents, read, evidence, limit)
        if (not sources or ranges_only) and seen != read:
            seen_sources, seen_ranges_only = choose(self.documents, seen, seen_evidence, limit)
            if seen_sources and not (ranges_only and seen_ranges_only):
                sources, ranges_only = seen_sources, seen_ranges_only
        # A file the answer names is cited whole, unless one of its lines already is; an answer that
        # rests on names only (a listing) cites them, not the ranges that happened to be read.
        cited = {source.path for source in sources} if not ranges_only else set()
        files = [source for source in file_sources(self.documents, named) if source.path not in cited]
        if files:
            sources = ([] if ranges_only else sources) + files
            sources, ranges_only = sources[:limit], False
        every: list[DocumentUse] | None = None
        if ranges_only:
            read_every, every = provenance.resolve_kinds((READ, SEEN))[0]
            sources = whole_ranges(self.documents, read_every or every, limit)
        notes = []
        if not sources:
            notes.append(self._why_empty(every if every is not None else provenance.resolve()))
        elif ranges_only:
            notes.append(f"{NO_SHARED_WORD}: these are the ranges that did")
        if provenance.failure:
            notes.append(f"some text that reached a model could not be matched ({provenance.failure})")
        cited_only = Findings(sources, [], "; ".join(notes) or None)
        if self.read and not self._halt.is_set():  # the documents read (source nodes) before the claims
            self._at("reading", cited_only)
            self.read_uses = provenance.resolve(kinds=READ)  # every block matched, not only near the answer
        self._at("checking", cited_only)
        if self._halt.is_set():
            return cited_only
        shown = found_in_blocks(blocks, exacts, stems_of(drafts))
        # A claim is checked against everything a model was shown, the preview included: it did see that.
        claims = check(drafts, self.documents, seen_evidence, shown, places, answer)
        if cut:
            notes.append(f"only the answer's first {MAX_CLAIMS} claims were checked")
        return Findings(sources, claims, "; ".join(notes) or None)

    def _places(
        self, exacts: Sequence[tuple[str, ExactKind]], found: dict[int, tuple[int, int]], cap: int
    ) -> list[list[tuple[int, int]]]:
        """Per exact claim, its first `cap` places in the whole input, for those no reached text holds (a few
        are found by ``str.find``: a made-up number costs no pass that encodes the input)."""
        places: list[list[tuple[int, int]]] = [[] for _ in exacts]
        missing = [index for index in range(len(exacts)) if index not in found]
        if missing:
            ranges = ((doc, document.text, 0, len(document.text)) for doc, document in enumerate(self.documents))
            for which, doc, offset in scan(ranges, [exacts[index][0] for index in missing], cap=cap):
                places[missing[which]].append((doc, offset))
        return places

    def _windows(self, words: Sequence[str], exacts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Per block of unmatched reached text, the stretches near the answer's words and claims."""
        blocks = self.provenance.blocks
        windows: list[list[tuple[int, int]]] = [[] for _ in blocks]
        patterns = [*words, *exacts]
        ranges = ((number, block.text, 0, len(block.text)) for number, block in enumerate(blocks))
        for which, number, offset in scan(ranges, patterns, fold=True):
            span = windows[number]
            start, end = max(0, offset - RELEVANT), offset + len(patterns[which]) + RELEVANT
            if span and start <= span[-1][1]:
                span[-1] = (span[-1][0], max(span[-1][1], end))
            else:
                span.append((start, end))
        for span in windows:
            span.sort()
        return windows

    def _why_nothing(self, answer: str, names_files: bool) -> str | None:
        """Why there is nothing to cite at all, before any matching (a file named is cited however short)."""
        if not answer.strip():
            return "the run gave no answer to cite"
        if not self.documents:
            return "the context has no text to cite"
        if not names_files and all(_few_words(document.text) for document in self.documents):
            return f"every document is under {MIN_WHOLE_TOKENS} words: too short to tell where a text came from"
        return None

    def _why_empty(self, every: list[DocumentUse]) -> str:
        """Why an answer with claims has no sources."""
        provenance = self.provenance
        if provenance.empty:
            return NOTHING_REACHED
        if every:
            return NO_SHARED_WORD
        why = "no text of the input reached a model (what did was the run's own: its code's output, prompts it wrote)"
        if provenance.unmatched_chars:
            why += (
                f"; {provenance.unmatched_chars:,} characters that reached a model, beyond the first "
                f"{MAX_BLOCKS_CHARS:,} that anchors did not match, were not compared"
            )
        return why


async def _in_thread(work: Callable[[], Findings]) -> Findings:
    """`work()` on a daemon thread of its own, awaited; a cancelled wait leaves it to end by itself."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Findings] = loop.create_future()

    def settle(outcome: Findings | BaseException) -> None:
        if not done.done():
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

    def run() -> None:
        outcome: Findings | BaseException
        try:
            outcome = work()
        except BaseException as exc:
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            loop.call_soon_threadsafe(settle, outcome)

    threading.Thread(target=run, name="rlm-sources-findings", daemon=True).start()
    return await done


def _few_words(text: str) -> bool:
    return all(count < MIN_WHOLE_TOKENS for count, _ in enumerate(TOKEN.finditer(text), 1))
