"""What `rlm_query` hands back: a lean result by default, the whole record when asked (``detail="full"``).

Clients hand a tool's ``structuredContent`` to their model (Claude Code does), so every character of it is the
agent's context, the very thing an RLM exists to save. The default result holds what an agent acts on: the
answer, its sources as ``path:line`` strings, what no input supports in short, the finish reason and cost
(plus the error, the typed value, a resume note and the trajectory id when there are any). The rest (claims
in full with their spans, files read and skipped, byte counts, usage by model, timings) is under ``detail``
only with ``detail="full"``; the trajectory resource has the run itself.

Everything a result shows of a file name or of the input's text is escaped (`shown_path`, `shown_text`):
a file name cannot forge a line of the ``Sources:`` block, nor an excerpt carry a terminal's escape sequences.
The answer and the error are escaped the same way (newlines and tabs kept): a model that read a hostile input
can put control characters in its answer, and JSON writes each one as six (``\u0001``), so an answer of them
would weigh six times its text block in the structured content the agent's model reads.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from rlm_adapters._terminal import escape_controls
from rlm_adapters.core import FinishReason, RLMResult
from rlm_adapters.core.lm import redact
from rlm_adapters.errors import QueryError
from rlm_adapters.files import LoadResult
from rlm_adapters.sources import NOWHERE, Claim, Place, Source, sources_block

TRAJECTORY_URI = "rlm://trajectories/{id}"
DETAILS = ("lean", "full")
Detail = Literal["lean", "full"]
UNSUPPORTED_CHARS = 80  # an unsupported claim is quoted this far in the lean result
UNSUPPORTED_SHOWN = 12  # and this many of them, then how many more detail="full" lists


def refusal(error: BaseException) -> ToolError:
    """The tool error a refusal of ours (configuration, paths, limits) becomes: its one-line message, which the
    agent reads, without the credentials of any URL it quotes (a model endpoint's, `core.lm.redact`)."""
    return ToolError(redact(str(error)))


def shown_path(path: str) -> str:
    """`path` on one line: control characters, newlines and tabs shown as escapes (``\\n``, ``\\x1b``)."""
    return escape_controls(path, one_line=True)


def shown_text(text: str) -> str:
    """`text` (an excerpt of the input) with control characters shown as escapes, newlines kept."""
    return escape_controls(text)


def check_detail(detail: str | None) -> Detail:
    """The result's detail, ``lean`` when not given.

    Raises:
        QueryError: not one of ``lean`` or ``full``.
    """
    if detail is None or detail == "lean":
        return "lean"
    if detail == "full":
        return "full"
    raise QueryError(f"detail={str(detail)[:64]!r} is not one of {', '.join(DETAILS)}; pass detail='full' for claims")


class FileRead(BaseModel):
    """A file the run was given."""

    path: str
    size: int
    invalid_utf8: bool = Field(description="The file was not valid UTF-8 and was decoded with replacement")


class FileSkipped(BaseModel):
    """A file that was found but not given to the run."""

    path: str
    reason: str


class PlaceCited(BaseModel):
    """Where a span lies in a document converted to text, in its own terms."""

    kind: Literal["page", "slide", "sheet", "cell"]
    start: str = Field(description="The first page, slide, sheet or cell")
    end: str | None = Field(default=None, description="The last one, when the span crosses several")
    line_start: int | None = Field(default=None, description="First line inside its one page, slide or cell, from 1")
    line_end: int | None = Field(default=None, description="Last line inside it (inclusive)")


class SourceCited(BaseModel):
    """A span of the input that reached a model and supports the answer."""

    path: str = Field(description="The file (as in files_read), or 'text' for the inline text")
    line_start: int = Field(description="First line, counted from 1")
    line_end: int = Field(description="Last line (inclusive)")
    chars: int = Field(description="Characters in the span")
    excerpt: str = Field(description="The span's text, cut to about 240 characters")
    place: PlaceCited | None = Field(default=None, description="Its page, slide, sheet or cell, if any")
    char_start: int | None = Field(
        default=None, description="On a line too long to cite by (a one-line input): where the span starts (0-based)"
    )
    char_end: int | None = Field(default=None, description="Where it ends (exclusive), with char_start")

    def as_source(self) -> Source:
        """The `Source` this was made from."""
        place = None if self.place is None else Place(**self.place.model_dump())
        return Source(
            self.path, self.line_start, self.line_end, self.chars, self.excerpt, place, self.char_start, self.char_end
        )


class ClaimChecked(BaseModel):
    """One claim of the answer (a number, name, quote or sentence), checked against the input read."""

    text: str
    kind: Literal["number", "name", "quote", "sentence"]
    status: Literal["supported", "unsupported"] = Field(
        description="supported: text that reached a model holds it; unsupported: none does, check it"
    )
    start: int = Field(description="Where the claim starts in the answer")
    end: int = Field(description="Where it ends")
    source: SourceCited | None = Field(default=None, description="The input span that holds it, if any")
    reason: str | None = Field(default=None, description="Why it is unsupported, or what alone supports it")
    via: Literal["input", "output"] | None = Field(
        default=None,
        description="input: a span of the input a model read holds it; output: only what the run's code "
        "printed or wrote does (check the computation)",
    )

    def as_claim(self) -> Claim:
        """The `Claim` this was made from."""
        source = None if self.source is None else self.source.as_source()
        return Claim(self.text, self.kind, self.status, self.start, self.end, source, self.reason, self.via)


class RLMQueryDetail(BaseModel):
    """What ``detail="full"`` adds to a result: the run's whole record."""

    iterations: int
    sub_calls: int
    route: str = Field("rlm", description="direct (one plain call to the root model) or rlm")
    route_reason: str | None = Field(None, description="Why that route: the prompt's tokens against the threshold")
    usage: dict[str, Any] = Field(description="Calls, tokens and cost: total, root, sub and by model")
    elapsed_seconds: float
    files_read: list[FileRead] = Field(default_factory=list)
    files_skipped: list[FileSkipped] = Field(default_factory=list)
    bytes_read: int = 0
    sources: list[SourceCited] = Field(
        default_factory=list, description="The sources in full: spans, sizes, excerpts and places"
    )
    claims: list[ClaimChecked] = Field(
        default_factory=list,
        description="The answer's numbers, names, quotes and sentences, each supported by an input span or not",
    )
    sources_note: str | None = Field(
        default=None, description="Why there are no sources (or only the ranges read), and what was not checked"
    )
    trajectory_uri: str | None = Field(None, description="Read it as a resource to see how the answer was found")


class RLMQueryOutput(BaseModel):
    """The structured result of `rlm_query`: lean unless the call passed ``detail="full"``.

    Keys whose value is empty or null (``error``, ``unsupported``, ``sources_unfinished``, ``resumed``,
    ``detail``; ``value`` without ``output_schema``) are left out of the result.
    """

    answer: str
    finish_reason: FinishReason = Field(
        description="final (answered), max_iterations, budget, timeout, error or cancelled"
    )
    cost_usd: float
    sources: list[str] = Field(
        default_factory=list, description="Where the answer comes from, best first: path:line or path:start-end"
    )
    unsupported: list[str] = Field(
        default_factory=list,
        description="Claims of the answer (cut short, at most 12) that no text which reached a model holds: "
        "check them; a reason follows when the input holds one where no model read it",
    )
    sources_unfinished: str | None = Field(
        None,
        description="The sources and claim checks were cut short (the server's --sources-timeout, or the call was "
        "stopped): what was not finished and why; sources and unsupported then hold only what was",
    )
    error: str | None = None
    resumed: str | None = Field(None, description="How many model calls were replayed from the call cache")
    value: Any = Field(None, description="With output_schema: the validated answer (null when none was valid)")
    trajectory_id: str = Field(description="The run's id: rlm://trajectories/{id} shows how it was found")
    detail: RLMQueryDetail | None = Field(None, description='Only with detail="full": the run\'s whole record')

    def structured(self, *, typed: bool) -> dict[str, Any]:
        """The result as ``structuredContent``: empty keys left out (`typed`: the call had an output_schema,
        so ``value`` stays, null or not)."""
        data = self.model_dump(mode="json")
        keep = {"sources", "value"} if typed else {"sources"}
        return {key: value for key, value in data.items() if key in keep or value not in (None, [])}

    def full(self) -> RLMQueryDetail:
        """The run's whole record (made on demand for the text block, even in a lean result)."""
        if self.detail is None:
            raise QueryError("this result was made without detail='full'")
        return self.detail


def summarize(
    result: RLMResult, loaded: LoadResult | None, log_dir: Path, *, resumed_from: str = "the call cache"
) -> RLMQueryOutput:
    """The structured content of a finished call, with its full record under ``detail`` (`RLMQueryOutput.lean`
    drops it); `resumed_from` names the cache in the resume note."""
    del log_dir  # the trajectory's place is its resource, not a path on the server
    sources = [_shown_source(source) for source in result.sources]
    claims = [_shown_claim(claim) for claim in result.claims]
    detail = RLMQueryDetail(
        iterations=result.iterations,
        sub_calls=int(result.metadata.get("sub_calls", 0)),
        route=str(result.metadata.get("route", "rlm")),
        route_reason=result.metadata.get("route_reason"),
        usage=result.usage_summary.to_dict(),
        elapsed_seconds=round(result.execution_time, 3),
        files_read=[FileRead(path=shown_path(f.path), size=f.size, invalid_utf8=f.invalid_utf8) for f in loaded.files]
        if loaded
        else [],
        files_skipped=[FileSkipped(path=shown_path(s.path), reason=shown_path(s.reason)) for s in loaded.skipped]
        if loaded
        else [],
        bytes_read=loaded.total_bytes if loaded else 0,
        sources=[SourceCited(**source.to_dict()) for source in sources],
        claims=[ClaimChecked(**claim.to_dict()) for claim in claims],
        sources_note=result.sources_note,
        trajectory_uri=TRAJECTORY_URI.format(id=result.run_id) if result.trajectory_file else None,
    )
    return RLMQueryOutput(
        answer=shown_text(result.response),
        finish_reason=result.finish_reason,
        cost_usd=round(result.cost, 8),
        sources=[source.location for source in sources],
        unsupported=_short_unsupported(claims),
        sources_unfinished=result.sources_note if "sources" in result.metadata.get("unfinished", {}) else None,
        error=None if result.error is None else shown_text(result.error),
        resumed=result.resumed(resumed_from),
        value=result.value,
        trajectory_id=result.run_id,
        detail=detail,
    )


def lean(output: RLMQueryOutput) -> RLMQueryOutput:
    """`output` without its full record."""
    return output.model_copy(update={"detail": None})


def answer_text(output: RLMQueryOutput) -> str:
    """The text content: the answer (with a first line saying so when the run stopped early), then a
    ``Sources:`` block of ``path:start-end`` lines (and an ``Unsupported:`` line naming the claims no input
    that reached a model holds), and the resume note when calls were replayed."""
    if output.finish_reason == "final":
        text = output.answer
    else:
        why = f"{output.finish_reason}: {output.error}" if output.error else output.finish_reason
        partial = output.answer or "(no partial answer)"
        text = f"[the run stopped before a final answer ({why}); best partial answer follows]\n{partial}"
    full = output.full()
    block = sources_block([s.as_source() for s in full.sources], [c.as_claim() for c in full.claims], full.sources_note)
    if block:
        text = f"{text}\n\n{block}"
    return f"{text}\n\n({output.resumed})" if output.resumed else text


def _shown_source(source: Source) -> Source:
    place = source.place
    if place is not None:  # a page or sheet label is the document's own text
        end = None if place.end is None else shown_path(place.end)
        place = dataclasses.replace(place, start=shown_path(place.start), end=end)
    return dataclasses.replace(source, path=shown_path(source.path), excerpt=shown_text(source.excerpt), place=place)


def _shown_claim(claim: Claim) -> Claim:
    source = None if claim.source is None else _shown_source(claim.source)
    reason = None if claim.reason is None else shown_path(claim.reason)
    return dataclasses.replace(claim, text=shown_text(claim.text), source=source, reason=reason)


def _short_unsupported(claims: list[Claim]) -> list[str]:
    """What no input supports, in short: each unsupported claim cut to `UNSUPPORTED_CHARS`, its reason only
    when it says more than "in no text that reached a model" (where the input holds it unread), a number or
    name inside an unsupported sentence left to that sentence, each said once, and after `UNSUPPORTED_SHOWN`
    of them one line saying how many more ``detail="full"`` lists."""
    unsupported = [claim for claim in claims if not claim.supported]
    spans = [(claim.start, claim.end) for claim in unsupported]
    shown = [
        claim
        for claim in unsupported
        if claim.reason not in (None, NOWHERE)
        or not any(start <= claim.start and claim.end <= end and (start, end) != (claim.start, claim.end)
                   for start, end in spans)
    ]  # fmt: skip
    lines = list(dict.fromkeys(_unsupported(claim) for claim in shown))  # a claim repeated is said once
    if len(lines) > UNSUPPORTED_SHOWN:
        more = len(lines) - UNSUPPORTED_SHOWN
        lines = [*lines[:UNSUPPORTED_SHOWN], f"… and {more} more: detail='full' lists every claim"]
    return lines


def _unsupported(claim: Claim) -> str:
    text = " ".join(claim.text.split())
    if len(text) > UNSUPPORTED_CHARS:
        text = text[: UNSUPPORTED_CHARS - 1].rstrip() + "…"
    return f"{text} ({claim.reason})" if claim.reason not in (None, NOWHERE) else text


__all__ = [
    "DETAILS",
    "TRAJECTORY_URI",
    "ClaimChecked",
    "Detail",
    "FileRead",
    "FileSkipped",
    "PlaceCited",
    "RLMQueryDetail",
    "RLMQueryOutput",
    "SourceCited",
    "answer_text",
    "check_detail",
    "lean",
    "refusal",
    "shown_path",
    "shown_text",
    "summarize",
]
