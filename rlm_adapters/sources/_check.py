"""Claims checked against the text that reached a model.

A claim is supported when text that reached a model holds it; the check says which text:

- ``via="input"``: input text a model read holds it (the reached ranges, `_evidence`), and `source` is that
  line. A number, name or quote must stand there exactly; a sentence needs the reached line (with its
  neighbours) holding most of its distinctive words: at least half of them, and two. A short fragment of
  the input that the run printed or sent also counts, when the input has it in at most `FEW_PLACES` places
  (else it cannot be said where it came from); so does the name (path) of a document the context holds.
- ``via="output"``: only what the run itself showed a model holds it (a count its code printed, a
  sub-model's reply it printed, a prompt it wrote): no input span backs it, so check the computation.

An unsupported claim says why: in no text that reached a model, or in the input but where no model read
it (with that place, to check).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlm_adapters.core import Claim, ClaimBasis, Source
from rlm_adapters.sources._citations import line_source
from rlm_adapters.sources._claims import Draft
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._evidence import Evidence, ExactKind, Unit, bounded, neighbours
from rlm_adapters.sources._needles import Block
from rlm_adapters.sources._scan import scan
from rlm_adapters.sources._words import word_at

FEW_PLACES = 3
NOWHERE = "in no text that reached a model"
OWN_TEXT = "only in text the run showed a model itself (what its code printed or wrote), not in input it read"
FEW_WORDS = "no line that reached a model holds most of its words"


def exacts_of(drafts: Sequence[Draft]) -> list[tuple[str, ExactKind]]:
    """The exact strings to look for: every claim but sentences, in order."""
    return [(d.text, d.kind) for d in drafts if d.kind != "sentence"]


def stems_of(drafts: Sequence[Draft]) -> list[str]:
    """Every stem of the sentence claims, each once."""
    return list(dict.fromkeys(word for d in drafts for word in d.words))


def check(
    drafts: Sequence[Draft],
    documents: Sequence[Document],
    evidence: Evidence,
    shown: tuple[set[int], list[set[str]]],
    places: Sequence[Sequence[tuple[int, int]]],
    answer: str = "",
) -> list[Claim]:
    """Each draft as a supported or unsupported claim.

    Args:
        drafts: The answer's claims.
        documents: The corpus.
        evidence: What of the answer the reached input holds (exact strings indexed as `exacts_of`).
        shown: What the reached text anchors did not match holds (`found_in_blocks`): the indexes of the
            exact strings, and per block the sentence stems.
        places: Per exact string, where the whole input has it (the first few, as `_needles.match` finds).
        answer: The answer the drafts were cut from (a name or number inside a supported quote or sentence
            is supported where that span's input holds it as the answer writes it).
    """
    names = {document.path: number for number, document in enumerate(documents)}
    in_blocks, block_stems = shown
    claims: list[Claim] = []
    spans: list[tuple[Draft, int, int, int]] = []  # input-supported quotes and sentences: where the input has them
    exact = -1
    for draft in drafts:
        if draft.kind == "sentence":
            claim, unit = _sentence(draft, documents, evidence, block_stems)
            claims.append(claim)
            if unit is not None:
                spans.append((draft, *_around(documents, unit, evidence.where[unit])))
            continue
        exact += 1
        found = evidence.exact.get(exact)
        if found is not None:
            claims.append(_supported(draft, "input", line_source(documents[found[0]], found[1])))
            if draft.kind == "quote":
                spans.append((draft, found[0], found[1], found[1] + len(draft.text)))
            continue
        if draft.text in names:  # a document's own name: the context holds it
            claims.append(_supported(draft, "input", Source(draft.text, 0, 0, 0, "")))
            continue
        count, first = _standing(documents, draft, places[exact] if exact < len(places) else [])
        if exact in in_blocks and first is not None and count <= FEW_PLACES:
            claims.append(_supported(draft, "input", line_source(documents[first[0]], first[1])))
        elif exact in in_blocks:
            claims.append(_supported(draft, "output", None, OWN_TEXT))
        elif first is not None:
            where = line_source(documents[first[0]], first[1]).location
            claims.append(_unsupported(draft, f"in the input ({where}) but in no text that reached a model"))
        else:
            claims.append(_unsupported(draft, NOWHERE))
    return [_inside(claim, spans, documents, answer) for claim in claims] if answer and spans else claims


def _around(documents: Sequence[Document], unit: Unit, offset: int) -> tuple[int, int, int]:
    """``(document, start, end)`` of a unit and its neighbours (where a sentence's words were found)."""
    document = documents[unit[0]]
    _, start, end = document.unit(offset)
    return unit[0], document.unit(max(0, start - 1))[1], document.unit(min(len(document.text), end + 1))[2]


def _inside(
    claim: Claim, spans: list[tuple[Draft, int, int, int]], documents: Sequence[Document], answer: str
) -> Claim:
    """`claim`, supported when it is an unsupported name or number cut from a supported quote or sentence whose
    input holds it as the answer writes it, with the characters the answer glues to it (``_convert_other(`` in
    ``other = _convert_other(other)``): what the model quoted verbatim is found verbatim."""
    if claim.supported or claim.kind not in ("name", "number"):
        return claim
    for span, doc, begin, end in spans:
        if span.start <= claim.start and claim.end <= span.end and (span.start, span.end) != (claim.start, claim.end):
            low, high = max(span.start, claim.start - 1), min(span.end, claim.end + 1)
            at = documents[doc].text.find(answer[low:high], begin, end)
            if at >= 0:
                source = line_source(documents[doc], at + claim.start - low)
                return Claim(claim.text, claim.kind, "supported", claim.start, claim.end, source=source, via="input")
    return claim


def found_in_blocks(
    blocks: Sequence[Block], exacts: Sequence[tuple[str, ExactKind]], stems: Sequence[str]
) -> tuple[set[int], list[set[str]]]:
    """What `blocks` hold of the answer: the indexes of the exact strings standing somewhere in them, and
    per block the stems (of `stems`) standing in it. One pass over the blocks."""
    found: set[int] = set()
    per_block: list[set[str]] = [set() for _ in blocks]
    if not blocks or not (exacts or stems):
        return found, per_block
    ranges = ((number, block.text, 0, len(block.text)) for number, block in enumerate(blocks))
    for which, number, offset in scan(ranges, [*(text for text, _ in exacts), *stems], fold=True):
        block = blocks[number].text
        if which >= len(exacts):
            stem = stems[which - len(exacts)]
            if word_at(block, offset, len(stem)):
                per_block[number].add(stem)
            continue
        text, kind = exacts[which]
        if which not in found and block.startswith(text, offset) and bounded(block, offset, len(text), kind):
            found.add(which)
    return found, per_block


def _standing(
    documents: Sequence[Document], draft: Draft, found: Sequence[tuple[int, int]]
) -> tuple[int, tuple[int, int] | None]:
    """In how many of `found` the draft stands alone (counting to one past `FEW_PLACES`), and the first."""
    kind: ExactKind = "quote" if draft.kind == "quote" else "number" if draft.kind == "number" else "name"
    count, first = 0, None
    for doc, offset in found:
        if bounded(documents[doc].text, offset, len(draft.text), kind):
            count += 1
            first = first or (doc, offset)
            if count > FEW_PLACES:
                break
    return count, first


def _sentence(
    draft: Draft, documents: Sequence[Document], evidence: Evidence, block_stems: list[set[str]]
) -> tuple[Claim, Unit | None]:
    """A sentence claim, and the unit of the input that supports it (None when no input unit does)."""
    words = set(draft.words)
    need = min(len(words), max(2, (len(words) + 1) // 2))
    best: tuple[int, Unit] | None = None  # covered, unit
    for unit, stems in evidence.lines.items():
        if not stems & words:
            continue
        near = set().union(*(evidence.lines.get(other, set()) for other in neighbours(unit)))
        covered = len(near & words)
        if best is None or covered > best[0] or (covered == best[0] and unit < best[1]):
            best = (covered, unit)
    if best is not None and best[0] >= need:
        unit = best[1]
        return _supported(draft, "input", line_source(documents[unit[0]], evidence.where[unit])), unit
    if any(len(stems & words) >= need for stems in block_stems):
        return _supported(draft, "output", None, OWN_TEXT), None
    return _unsupported(draft, NOWHERE if best is None else FEW_WORDS), None


def _supported(draft: Draft, via: ClaimBasis, source: Source | None, reason: str | None = None) -> Claim:
    return Claim(draft.text, draft.kind, "supported", draft.start, draft.end, source=source, reason=reason, via=via)


def _unsupported(draft: Draft, reason: str) -> Claim:
    return Claim(draft.text, draft.kind, "unsupported", draft.start, draft.end, reason=reason)
