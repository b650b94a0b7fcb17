"""Which documents a run actually used, and which character ranges of each.

A document counts as used when its text crossed the sandbox boundary towards a model: it was part of
a sub-call prompt (`SubCallStarted.prompt`, sent by the REPL through the host broker) or of what a
cell printed back to a root model (`CellExecuted.output`, returned by the worker). Both are the exact
texts the host saw, for every sandbox kind, so nothing is guessed from the answer.

Matching is done on word tokens, so it survives what code typically does to text on the way out:
slicing at any character, joining, wrapping in an instruction, ``print(doc)`` of a dict (whose repr
escapes newlines and quotes). Each document's token k-grams at every `stride`-th position are anchors
in one hash index; a probe text is scanned k-gram by k-gram, the anchor hits near a position are extended
left and right token by token, and the longest extension wins (so boilerplate shared by many documents
goes to the one whose text really continues; text shared equally goes to none, unless it is a whole
duplicate document). Any shared run of at least ``k + stride - 1`` tokens is found, and a short document
only when it appears whole; building is linear in the corpus and matching about linear in the probe.

Limits: JSON unicode escapes (``json.dumps`` with ``ensure_ascii``) hide non-ASCII words; text a
model saw only after code rewrote it (translated, reworded, re-cased in another script) is not found;
documents under ``k`` words are never matched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from rlm_adapters.core.events import CellExecuted, Event, SubCallStarted
from rlm_adapters.core.prompts import truncate_output

# A word token; one right after a backslash is cut at its first character so that ``\n`` / ``\t``
# escapes in a repr (``'a\\nb'``) tokenise exactly like the real newline in the document (``a``, ``b``).
_TOKEN = re.compile(r"(?<!\\)[^\W_]+")
_BLOCK = 64  # tokens compared per slice while extending a match (slice equality runs in C)


def _tokens(text: str) -> list[str]:
    folded = text.lower()
    if len(folded) == len(text):
        return _TOKEN.findall(folded)
    # Rare characters change length when lowered; tokenise the original so offsets stay right.
    return [token.lower() for token in _TOKEN.findall(text)]


def _offsets(text: str) -> tuple[list[int], list[int]]:
    folded = text.lower()
    source = folded if len(folded) == len(text) else text
    starts: list[int] = []
    ends: list[int] = []
    for match in _TOKEN.finditer(source):
        starts.append(match.start())
        ends.append(match.end())
    return starts, ends


@dataclass
class DocumentUse:
    """How one document was used by a run.

    Attributes:
        index: Its position in the document list.
        doc_id: Its id.
        ranges: Merged ``(start, end)`` character ranges of its text that reached a model, sorted.
        sub_calls: How many sub-call prompts held part of it.
        printed: How many cell outputs shown to a root model held part of it.
    """

    index: int
    doc_id: str
    ranges: list[tuple[int, int]] = field(default_factory=list)
    sub_calls: int = 0
    printed: int = 0

    @property
    def chars(self) -> int:
        """Characters of the document covered by `ranges`."""
        return sum(end - start for start, end in self.ranges)


class DocumentIndex:
    """An anchor index over documents' word tokens, for finding where their text reappears.

    Args:
        texts: The documents' texts.
        ids: Their ids (same length).
        k: Tokens per anchor.
        stride: Every `stride`-th token position of a document starts an anchor.
    """

    def __init__(self, texts: Sequence[str], ids: Sequence[str], *, k: int = 5, stride: int = 4) -> None:
        if len(texts) != len(ids):
            raise ValueError(f"{len(texts)} texts but {len(ids)} ids")
        self.k = k
        self.stride = stride
        self.min_tokens = k + stride - 1
        self.ids = list(ids)
        self._texts = texts
        self._tokens: list[list[str]] = []
        self._offsets: dict[int, tuple[list[int], list[int]]] = {}  # filled only for documents used
        self._anchors: dict[int, int | list[int]] = {}
        for doc, text in enumerate(texts):
            self._add(doc, text)

    def _add(self, doc: int, text: str) -> None:
        tokens = _tokens(text)
        self._tokens.append(tokens)
        k = self.k
        # A short document is only found when it appears whole, so anchor every position of it.
        step = 1 if len(tokens) < self.min_tokens else self.stride
        anchors = self._anchors
        for pos in range(0, len(tokens) - k + 1, step):
            key = hash(tuple(tokens[pos : pos + k]))
            entry = (doc << 32) | pos
            found = anchors.get(key)
            if found is None:
                anchors[key] = entry
            elif isinstance(found, list):
                found.append(entry)
            else:
                anchors[key] = [found, entry]

    def find(self, text: str) -> list[tuple[int, int, int]]:
        """Where documents' text appears in `text`.

        Returns:
            ``(document index, first token, end token)`` spans, in probe order. A span that several
            documents share equally (common boilerplate) is reported for none of them, unless it is the
            whole of each (duplicate documents).
        """
        probe = _tokens(text)
        k = self.k
        spans: list[tuple[int, int, int]] = []
        j = 0
        while j + k <= len(probe):
            if self._anchors.get(hash(tuple(probe[j : j + k]))) is None:
                j += 1
                continue
            # Every document holding a long enough run through probe token j has an anchor in the next
            # `stride` positions, not necessarily at j: gather them all before picking the longest.
            matches: dict[tuple[int, int, int], int] = {}
            for at in range(j, min(j + self.stride, len(probe) - k + 1)):
                found = self._anchors.get(hash(tuple(probe[at : at + k])))
                for entry in () if found is None else found if isinstance(found, list) else [found]:
                    span = self._extend(entry >> 32, entry & 0xFFFFFFFF, probe, at)
                    if span is not None:
                        first, end, probe_end = span
                        matches[(entry >> 32, first, end)] = probe_end
            if not matches:
                j += 1
                continue
            longest = max(end - first for _, first, end in matches)
            best = [m for m in matches if m[2] - m[1] == longest]
            best_end = max(matches[m] for m in best)
            if len(best) > 1:
                best = [m for m in best if m[1] == 0 and m[2] == len(self._tokens[m[0]])]
            spans.extend(m for m in best if self._counts(m))
            j = max(j + 1, best_end)
        return spans

    def _extend(self, doc: int, pos: int, probe: list[str], j: int) -> tuple[int, int, int] | None:
        """Grow the anchor hit at document token `pos` / probe token `j` to the longest common run."""
        tokens = self._tokens[doc]
        k = self.k
        if tokens[pos : pos + k] != probe[j : j + k]:
            return None  # a hash collision
        first, left = pos, j
        while first >= _BLOCK and left >= _BLOCK and tokens[first - _BLOCK : first] == probe[left - _BLOCK : left]:
            first, left = first - _BLOCK, left - _BLOCK
        while first > 0 and left > 0 and tokens[first - 1] == probe[left - 1]:
            first, left = first - 1, left - 1
        end, right = pos + k, j + k
        while tokens[end : end + _BLOCK] == probe[right : right + _BLOCK] and end + _BLOCK <= len(tokens):
            end, right = end + _BLOCK, right + _BLOCK
        while end < len(tokens) and right < len(probe) and tokens[end] == probe[right]:
            end, right = end + 1, right + 1
        return first, end, right

    def _counts(self, span: tuple[int, int, int]) -> bool:
        doc, first, end = span
        return end - first >= self.min_tokens or (first == 0 and end == len(self._tokens[doc]))

    def char_range(self, doc: int, first: int, end: int) -> tuple[int, int]:
        """Character range of tokens ``first..end`` of `doc`, widened to the text's edges at its ends."""
        if doc not in self._offsets:
            self._offsets[doc] = _offsets(self._texts[doc])
        starts, ends = self._offsets[doc]
        start = 0 if first == 0 else starts[first]
        stop = len(self._texts[doc]) if end == len(self._tokens[doc]) else ends[end - 1]
        return start, stop


class ProvenanceTracker:
    """Collects the texts of one run that reached a model, then maps them to documents.

    Subscribe `on_event` to the run's events (``RLM.acompletion(..., callbacks=[tracker.on_event])``);
    call `resolve` after the run. Collecting is cheap (it keeps references to texts the events already
    hold); the matching happens once in `resolve`, which a caller may run in a worker thread.

    Args:
        max_output_chars: The run's ``max_output_chars``: only that much of a cell's output (head and
            tail) was shown to the root model.
    """

    def __init__(self, *, max_output_chars: int = 10_000) -> None:
        self.max_output_chars = max_output_chars
        self._probes: dict[str, list[int]] = {}  # text -> [sub-call count, printed count]

    def on_event(self, event: Event) -> None:
        """Keep the text of a sub-call prompt or of a cell output the root model saw."""
        if isinstance(event, SubCallStarted) and event.call_kind != "tool":
            self._probes.setdefault(event.prompt, [0, 0])[0] += 1
        elif isinstance(event, CellExecuted) and not event.final:
            # A cell that ended the run sent nothing back; the others were cut like the loop cuts them.
            shown = truncate_output(event.output, self.max_output_chars)
            if event.error:
                shown = f"{shown}\n{event.error}"
            if shown.strip():
                self._probes.setdefault(shown, [0, 0])[1] += 1

    @property
    def empty(self) -> bool:
        """Nothing has reached a model yet."""
        return not self._probes

    def resolve(self, index: DocumentIndex) -> list[DocumentUse]:
        """The documents of `index` used so far, in document order, each with merged character ranges."""
        spans: dict[int, list[tuple[int, int]]] = {}
        counts: dict[int, list[int]] = {}
        for text, (sub_calls, printed) in self._probes.items():
            seen: set[int] = set()
            for doc, first, end in index.find(text):
                spans.setdefault(doc, []).append((first, end))
                seen.add(doc)
            for doc in seen:
                tally = counts.setdefault(doc, [0, 0])
                tally[0] += sub_calls
                tally[1] += printed
        uses: list[DocumentUse] = []
        for doc in sorted(spans):
            merged: list[list[int]] = []
            for first, end in sorted(spans[doc]):
                if merged and first <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], end)
                else:
                    merged.append([first, end])
            uses.append(
                DocumentUse(
                    index=doc,
                    doc_id=index.ids[doc],
                    ranges=[index.char_range(doc, first, end) for first, end in merged],
                    sub_calls=counts[doc][0],
                    printed=counts[doc][1],
                )
            )
        return uses
