"""Claims checked against the input text that reached a model.

A number, name or quote is supported where reached input text holds it exactly (`_evidence`); failing
that, where a model was shown it in a short fragment of the input that the run printed or sent, when the
input has it in at most `FEW_PLACES` places (else it cannot be said where it came from). A sentence is
supported by the reached line (with its neighbours) that holds most of its distinctive words: at least
half of them, and two. An unsupported claim says why: in no text that reached a model, only in text the
run itself produced (what code printed or a model wrote), or in the input but where no model read it
(with that place, to check).
"""

from __future__ import annotations

from collections.abc import Sequence

from rlm_adapters.core.result import Claim, Source
from rlm_adapters.sources._citations import line_source
from rlm_adapters.sources._claims import Draft
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._evidence import Evidence, ExactKind, bounded
from rlm_adapters.sources._needles import Block
from rlm_adapters.sources._scan import scan

FEW_PLACES = 3
NOWHERE = "in no text that reached a model"
OWN_TEXT = "only in text the run produced itself (printed by code or written by a model), not in input it read"
FEW_WORDS = "no line that reached a model holds most of its words"


def exacts_of(drafts: Sequence[Draft]) -> list[tuple[str, ExactKind]]:
    """The exact strings to look for: every claim but sentences, in order."""
    return [(d.text, d.kind) for d in drafts if d.kind != "sentence"]


def check(
    drafts: Sequence[Draft],
    documents: Sequence[Document],
    evidence: Evidence,
    in_blocks: set[int],
    places: Sequence[Sequence[tuple[int, int]]],
) -> list[Claim]:
    """Each draft as a supported or unsupported claim.

    Args:
        drafts: The answer's claims.
        documents: The corpus.
        evidence: What of the answer the reached input holds (exact strings indexed as `exacts_of`).
        in_blocks: Indexes (as `exacts_of`) of the exact strings found in reached text anchors did not match.
        places: Per exact string, where the whole input has it (the first few, as `_needles.match` finds).
    """
    claims: list[Claim | None] = []
    missing: list[tuple[int, int, Draft]] = []  # (claim index, exact index, draft)
    exact = 0
    for draft in drafts:
        if draft.kind == "sentence":
            claims.append(_sentence(draft, documents, evidence))
            continue
        found = evidence.exact.get(exact)
        if found is not None:
            claims.append(_supported(draft, line_source(documents[found[0]], found[1])))
        else:
            claims.append(None)
            missing.append((len(claims) - 1, exact, draft))
        exact += 1
    for position, index, draft in missing:
        count, first = _standing(documents, draft, places[index] if index < len(places) else [])
        if index in in_blocks and first is not None and count <= FEW_PLACES:
            claims[position] = _supported(draft, line_source(documents[first[0]], first[1]))
        elif index in in_blocks:
            claims[position] = _unsupported(draft, OWN_TEXT)
        elif first is not None:
            where = line_source(documents[first[0]], first[1]).location
            claims[position] = _unsupported(draft, f"in the input ({where}) but in no text that reached a model")
        else:
            claims[position] = _unsupported(draft, NOWHERE)
    return [claim for claim in claims if claim is not None]


def found_in_blocks(blocks: Sequence[Block], exacts: Sequence[tuple[str, ExactKind]]) -> set[int]:
    """Indexes of the exact strings that stand somewhere in `blocks`."""
    found: set[int] = set()
    if not exacts or not blocks:
        return found
    ranges = ((number, block.text, 0, len(block.text)) for number, block in enumerate(blocks))
    for which, number, offset in scan(ranges, [text for text, _ in exacts], fold=True):
        text, kind = exacts[which]
        block = blocks[number].text
        if which not in found and block.startswith(text, offset) and bounded(block, offset, len(text), kind):
            found.add(which)
    return found


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


def _sentence(draft: Draft, documents: Sequence[Document], evidence: Evidence) -> Claim:
    words = set(draft.words)
    need = min(len(words), max(2, (len(words) + 1) // 2))
    best: tuple[int, int, int] | None = None  # covered, document, line
    for (doc, line), stems in evidence.lines.items():
        if not stems & words:
            continue
        near = set().union(*(evidence.lines.get((doc, line + step), set()) for step in (-1, 0, 1)))
        covered = len(near & words)
        if best is None or covered > best[0] or (covered == best[0] and (doc, line) < best[1:]):
            best = (covered, doc, line)
    if best is None:
        return _unsupported(draft, NOWHERE)
    if best[0] < need:
        return _unsupported(draft, FEW_WORDS)
    doc, line = best[1], best[2]
    return _supported(draft, line_source(documents[doc], evidence.where[(doc, line)]))


def _supported(draft: Draft, source: Source) -> Claim:
    return Claim(draft.text, draft.kind, "supported", draft.start, draft.end, source=source)


def _unsupported(draft: Draft, reason: str) -> Claim:
    return Claim(draft.text, draft.kind, "unsupported", draft.start, draft.end, reason=reason)
