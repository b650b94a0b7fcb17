"""What a run returns."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.core.events import FinishReason
from rlm_adapters.core.record_base import FrozenRecord, Record
from rlm_adapters.core.usage import UsageSummary

PlaceKind = Literal["page", "slide", "sheet", "cell"]
ClaimKind = Literal["number", "name", "quote", "sentence"]
ClaimStatus = Literal["supported", "unsupported"]
ClaimBasis = Literal["input", "output"]
_PLACE_FORMS = {"page": ("p{}", "p{}-{}"), "slide": ("slide {}", "slides {}-{}"), "sheet": ("{}", "{}-{}")}


@dataclass(frozen=True, eq=False, repr=False)  # `FrozenRecord`'s eq, hash and repr
class Place(FrozenRecord):
    """Where a span lies in a document that was converted to text, in the document's own terms.

    Lines count the text a model read; a converted document (a PDF, slides, a spreadsheet) also has its own
    places, which its converter records in the document's metadata (see `rlm_adapters.sources`).

    Attributes:
        kind: ``page``, ``slide``, ``sheet`` or ``cell``.
        start: The first place: ``"12"`` (page 12), ``"3"`` (slide 3), ``"Q3"`` (a sheet), ``"Q3!B12"`` (a cell).
        end: The last place when the span crosses several (inclusive), else None.
        line_start: The span's first line inside its one page, slide or notebook cell, counted from 1 as the
            page's own text runs (the converter's ``[page 12]`` heading is not a line of it); None when the span
            crosses places or the place has no lines (a spreadsheet's cells and sheets are cited by cell range).
        line_end: The span's last line inside that place (inclusive), or None.
        printed: The pages' own labels where they differ from their numbers (``79``, ``79-80``: a PDF's
            printed page 79 is its page 88), shown after the place: ``p88 (79)``.
    """

    kind: PlaceKind
    start: str
    end: str | None = None
    line_start: int | None = None
    line_end: int | None = None
    printed: str | None = None

    def __str__(self) -> str:
        """``p12``, ``p12-13``, ``slide 3``, ``Q3!B2:D9``; with lines inside the place, ``p12:L4`` or ``p12:L4-6``."""
        if self.kind == "cell":
            where = self.start if self.end is None else f"{self.start}:{self.end.rsplit('!', 1)[-1]}"
        else:
            one, several = _PLACE_FORMS[self.kind]
            where = one.format(self.start) if self.end is None else several.format(self.start, self.end)
        label = f" ({self.printed})" if self.printed else ""
        if self.line_start is None:
            return where + label
        end = self.line_end if self.line_end is not None else self.line_start
        return f"{where}:L{self.line_start}" + ("" if end == self.line_start else f"-{end}") + label

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the same keys."""
        return {
            "kind": self.kind,
            "start": self.start,
            "end": self.end,
            "line_start": self.line_start,
            "line_end": self.line_end,
            **({"printed": self.printed} if self.printed else {}),
        }


@dataclass(frozen=True, eq=False, repr=False)  # `FrozenRecord`'s eq, hash and repr
class ToolCall(FrozenRecord):
    """A checked call of one of the caller's tools, for the caller to run.

    Attributes:
        id: Its id (OpenAI's shape, ``call_`` and 24 hex digits), for the result to refer to; derived from
            the root conversation, so a replayed run issues the same one.
        name: The tool.
        args: The arguments, valid under the tool's schema.
    """

    id: str
    name: str
    args: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the same keys."""
        return {"id": self.id, "name": self.name, "args": self.args}


@dataclass(frozen=True, eq=False, repr=False)  # `FrozenRecord`'s eq, hash and repr
class InvalidToolCall(FrozenRecord):
    """A call the model got wrong and did not mend before its retries ran out.

    Attributes:
        id: Its id (as a `ToolCall`'s).
        name: The tool it named (None when it named none).
        args: The arguments as JSON text, cut to a few thousand characters (None when there were none).
        error: What was wrong.
    """

    id: str
    name: str | None
    args: str | None
    error: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the same keys."""
        return {"id": self.id, "name": self.name, "args": self.args, "error": self.error}


@dataclass(frozen=True, eq=False, repr=False)  # `FrozenRecord`'s eq, hash and repr
class Source(FrozenRecord):
    """A span of an input that reached a model and supports the answer (`RLMResult.sources`).

    Computed after a run by `rlm_adapters.sources.SourceTracker`; defined here so that a result can carry
    sources without the engine loading the citation index.

    Attributes:
        path: The document's path (or id).
        line_start: First line of the document's text, counted from 1 (0 when the source is the document's
            name, not a span of its text).
        line_end: Last line (inclusive).
        chars: Characters in the span.
        excerpt: The span's text, cut short (`rlm_adapters.sources` cuts it to about 240 characters).
        place: The span's page, slide, sheet or cell, for a document converted to text (else None).
        char_start: Where the span starts in the document's text (a 0-based character offset), for a span of
            a line too long to cite by (a one-line input); else None.
        char_end: Where it ends (exclusive), with `char_start`.
    """

    path: str
    line_start: int
    line_end: int
    chars: int
    excerpt: str
    place: Place | None = None
    char_start: int | None = None
    char_end: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the same keys (``place`` as a dict, or None)."""
        return {
            "path": self.path,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "chars": self.chars,
            "excerpt": self.excerpt,
            "place": None if self.place is None else self.place.to_dict(),
            "char_start": self.char_start,
            "char_end": self.char_end,
        }

    @property
    def location(self) -> str:
        """``path:start-end`` or ``path:line`` (``path:p12:L4-6`` inside a page; ``path:1 chars 1,204,000-1,404,000``
        on a line too long to cite by), as editors and agents link."""
        if self.place is not None:
            return f"{self.path}:{self.place}"
        if self.line_start == 0:
            return self.path
        lines = str(self.line_start) if self.line_start == self.line_end else f"{self.line_start}-{self.line_end}"
        if self.char_start is not None and self.char_end is not None:
            return f"{self.path}:{lines} chars {self.char_start:,}-{self.char_end:,}"
        return f"{self.path}:{lines}"


@dataclass(frozen=True, eq=False, repr=False)  # `FrozenRecord`'s eq, hash and repr
class Claim(FrozenRecord):
    """One checkable statement of an answer, and whether text that reached a model holds it.

    The answer is split into numbers, names (identifiers, proper names), quoted spans and sentences;
    numbers, names and quotes must appear exactly, a sentence by most of its distinctive words on one line.
    Checked after a run by `rlm_adapters.sources.SourceTracker` (`RLMResult.claims`).

    Attributes:
        text: The claim as the answer words it.
        kind: ``number``, ``name``, ``quote`` or ``sentence``.
        status: ``supported`` (text that reached a model holds it) or ``unsupported`` (none does).
        start: Where it starts in the answer (a character offset).
        end: Where it ends in the answer.
        source: The input span that holds it (a supported claim's, when the input does).
        reason: Why it is unsupported (for example "in no text that reached a model"), or, for a claim
            supported only by what the run itself showed a model, what that was.
        via: ``input`` (an input span a model read holds it: see `source`), ``output`` (only text the run
            produced, such as a count its code printed, holds it: check the computation), or None.
    """

    text: str
    kind: ClaimKind
    status: ClaimStatus
    start: int
    end: int
    source: Source | None = None
    reason: str | None = None
    via: ClaimBasis | None = None

    @property
    def supported(self) -> bool:
        """Whether the claim is supported."""
        return self.status == "supported"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the same keys (``source`` as a dict, or None)."""
        return {
            "text": self.text,
            "kind": self.kind,
            "status": self.status,
            "start": self.start,
            "end": self.end,
            "source": None if self.source is None else self.source.to_dict(),
            "reason": self.reason,
            "via": self.via,
        }


@dataclass(eq=False, repr=False)  # `Record`'s eq and repr
class RLMResult(Record):
    """The outcome of `RLM.completion` / `RLM.acompletion`.

    Attributes:
        response: The answer (on a budget, timeout or error finish: the best partial answer, maybe "").
        finish_reason: Why the run ended: ``final`` (the model answered), ``tool_calls`` (it called the
            caller's tools, in `tool_calls`), ``max_iterations``, ``budget``, ``timeout``, ``error`` or
            ``cancelled``.
        usage_summary: Calls, tokens and cost of every model call of every depth, each counted once.
        iterations: Root turns taken by the top-level run.
        run_id: The run's id, also its trajectory id.
        trajectory_file: The JSONL log of the run, when a logger was given.
        execution_time: Wall seconds.
        error: What went wrong, for ``error`` (and budget / timeout) finishes.
        final_value: The JSON value given to FINAL_VAR, when it was not a plain string (with `output_schema`,
            also the last value when none was valid).
        value: With `output_schema`, the validated answer: an instance of the model or dataclass, or the JSON
            value for a schema dict (None when the run did not end with a valid one).
        metadata: Sandbox kind and isolation level, depth reached, sub-call count; ``trajectory`` with an
            in-memory `RLMLogger()`; ``session`` in a persistent session; ``limit`` naming the limit that
            ended the run; with a call cache, ``replayed_cost`` (what the replayed calls cost when they were
            paid) and ``replayed_unpriced`` (the models of replayed calls whose cost is unknown);
            ``limits_raised`` when `on_budget` raised one.
        root_model: The top-level root model's name (the reference's ``RLMChatCompletion.root_model``).
        prompt: The prompt (context) as given to `completion` (the reference's ``RLMChatCompletion.prompt``).
        sources: The input lines that reached a model and support the answer, when the caller tracked
            them (`rlm_adapters.sources.SourceTracker`; every adapter does).
        claims: The answer's numbers, names, quotes and sentences, each supported (with its input span)
            or unsupported, when the caller tracked the run (as for `sources`).
        sources_note: Why `sources` is empty or holds only the ranges read, when it does.
        tool_calls: The calls of the caller's tools (``tools=``) the run ended with, checked against their
            schemas, for the caller to run (``finish_reason="tool_calls"``).
        invalid_tool_calls: Calls the model still got wrong when its retries ran out.
    """

    response: str
    finish_reason: FinishReason
    usage_summary: UsageSummary
    iterations: int
    run_id: str
    trajectory_file: Path | None = None
    execution_time: float = 0.0
    error: str | None = None
    final_value: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)
    root_model: str = ""
    # Not in repr: it is the whole context. asyncio.run formats its main task (and so this result) when it
    # restores the SIGINT handler, which built a 100 MB string, 2x the context on the host's peak.
    prompt: Any = field(default=None, repr=False)
    sources: list[Source] = field(default_factory=list)
    value: Any = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    invalid_tool_calls: list[InvalidToolCall] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    sources_note: str | None = None

    @property
    def cost(self) -> float:
        """Total cost of the run."""
        return self.usage_summary.total_cost

    @property
    def failed(self) -> bool:
        """The run ended with no answer because of an error: ``finish_reason="error"`` with no limit named in
        ``metadata["limit"]`` (a model call, the sandbox or a typed answer failed). `RLM` raises `RLMRunFailed`
        for it, and so do `ChatRLM` and the LlamaIndex LLM. A run a limit ended (``max_errors``, the engine's
        end of a model repeating itself, a budget, the time, ``max_iterations``) is not a failure: it keeps its
        best partial answer."""
        return self.finish_reason == "error" and "limit" not in self.metadata

    def resumed(self, source: str = "the call cache") -> str | None:
        """One line saying the run was resumed, when calls were replayed from the call cache (None otherwise):
        ``resumed: 40 of 60 model calls from calls.sqlite, $0.31 not paid again`` (`source`: where from).
        Calls of a model with no known price are never called free: ``..., not paid again (cost unknown: no
        price for 'llama3')``, or after a figure, ``$0.31 not paid again, plus calls of 'llama3' (no price)``.

        Every adapter says it the same way (the CLI on stderr, MCP in progress and the result, ChatRLM in
        ``response_metadata``, the engine in its log), so a resumed run is never silent.
        """
        total = self.usage_summary.total
        if not total.cached_calls:
            return None
        saved = float(self.metadata.get("replayed_cost") or 0.0)
        unpriced = ", ".join(repr(str(model))[:80] for model in self.metadata.get("replayed_unpriced") or ())
        head = f"resumed: {total.cached_calls} of {total.calls} model calls from {source}"
        if not unpriced:
            return f"{head}, {_dollars(saved)} not paid again"
        if saved > 0:
            return f"{head}, {_dollars(saved)} not paid again, plus calls of {unpriced} (no price)"
        return f"{head}, not paid again (cost unknown: no price for {unpriced})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "response": self.response,
            "finish_reason": self.finish_reason,
            "usage": self.usage_summary.to_dict(),
            "iterations": self.iterations,
            "run_id": self.run_id,
            "trajectory_file": str(self.trajectory_file) if self.trajectory_file else None,
            "execution_time": round(self.execution_time, 4),
            "error": self.error,
            "metadata": self.metadata,
            "root_model": self.root_model,
            "sources": [source.to_dict() for source in self.sources],
            **({"value": jsonable(self.value)} if self.value is not None else {}),
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "invalid_tool_calls": [call.to_dict() for call in self.invalid_tool_calls],
            "claims": [claim.to_dict() for claim in self.claims],
            "sources_note": self.sources_note,
        }


def jsonable(value: Any) -> Any:
    """A typed answer as JSON data (a model or dataclass dumped, anything else as it is)."""
    # Pydantic loads when a typed answer needs it, not with the engine; before something has imported it,
    # no value can be one of its models.
    loaded = sys.modules.get("pydantic")
    if loaded is not None and isinstance(value, loaded.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        pydantic = importlib.import_module("pydantic")
        return pydantic.TypeAdapter(type(value)).dump_python(value, mode="json")
    return value


def _dollars(amount: float) -> str:
    """`amount` as a resume note shows it: cents, or the first digits of a fraction of a cent (never "$0.00")."""
    if amount >= 0.01 or amount <= 0:
        return f"${amount:.2f}"
    return f"${amount:.6f}".rstrip("0") if amount >= 0.000001 else "under $0.000001"
