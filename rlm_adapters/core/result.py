"""What a run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.core.events import FinishReason
from rlm_adapters.core.jsonable import jsonable
from rlm_adapters.core.usage import UsageSummary


@dataclass(frozen=True)
class ToolCall:
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


@dataclass(frozen=True)
class InvalidToolCall:
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


@dataclass(frozen=True)
class Source:
    """A span of an input that reached a model and supports the answer (`RLMResult.sources`).

    Computed after a run by `rlm_adapters.sources.SourceTracker`; defined here so that a result can carry
    sources without the engine loading the citation index.

    Attributes:
        path: The document's path (or id).
        line_start: First line, counted from 1.
        line_end: Last line (inclusive).
        chars: Characters in the span.
        excerpt: The span's text, cut short (`rlm_adapters.sources` cuts it to about 240 characters).
    """

    path: str
    line_start: int
    line_end: int
    chars: int
    excerpt: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the same keys."""
        return {
            "path": self.path,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "chars": self.chars,
            "excerpt": self.excerpt,
        }

    @property
    def location(self) -> str:
        """``path:start-end`` (or ``path:line``), the form editors and agents turn into links."""
        lines = str(self.line_start) if self.line_start == self.line_end else f"{self.line_start}-{self.line_end}"
        return f"{self.path}:{lines}"


@dataclass
class RLMResult:
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
            paid); ``limits_raised`` when `on_budget` raised one.
        root_model: The top-level root model's name (the reference's ``RLMChatCompletion.root_model``).
        prompt: The prompt (context) as given to `completion` (the reference's ``RLMChatCompletion.prompt``).
        sources: The input lines that reached a model and support the answer, when the caller tracked
            them (`rlm_adapters.sources.SourceTracker`; every adapter does).
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

    @property
    def cost(self) -> float:
        """Total cost of the run."""
        return self.usage_summary.total_cost

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
        }
