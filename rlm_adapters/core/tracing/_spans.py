"""`RunTracer`: the run's event stream as OpenTelemetry spans, one subscriber like the trajectory log.

The tree, each span named and attributed as the GenAI conventions say (`_attributes`)::

    invoke_agent rlm                      one per run level; a nested run is a child of the cell (or batch)
      rlm.iteration                       one per root turn                            that started it
        chat MODEL                        the root call
        execute_tool repl                 each code block
          rlm.batch                       an llm_query_batched / rlm_query_batched call
            chat MODEL | invoke_agent rlm   its sub-calls and nested runs
          execute_tool NAME               a custom tool

Events arrive after the fact (a root call's event comes when it returned, a cell's when it ended), so spans
get explicit start and end times from the events' own (``time`` minus ``duration``); a cell whose sub-calls
arrive while it runs is opened at the first of them, from where the last root call or cell ended. Parents
are kept per run id, so sub-calls coming back from the sandbox and nested runs on other tasks find theirs.
A run's end ends whatever of it is still open (cancelled calls, an interrupted cell) with an error status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

import rlm_adapters.core.tracing._attributes as at
from rlm_adapters.core.events import (
    BudgetEvent,
    CellExecuted,
    ConcurrencyCut,
    Event,
    RootCall,
    RunFinished,
    RunStarted,
    SubCallFinished,
    SubCallStarted,
    cut,
)

# Finish reasons that still answered the question: the run's span keeps an unset (ok) status.
ANSWERED = frozenset({"final", "max_iterations"})


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


@dataclass
class _Batch:
    span: Span
    size: int
    finished: int = 0
    last_end: float = 0.0


@dataclass
class _Run:
    """The open spans of one run level."""

    span: Span
    parent_run_id: str | None
    query: str | None
    cursor: float  # when the last root call or cell ended: where a cell opened by a sub-call starts
    iteration: int = 0
    iteration_span: Span | None = None
    cell: Span | None = None
    calls: dict[str, Span] = field(default_factory=dict)
    batches: dict[str, _Batch] = field(default_factory=dict)
    usage: at.Usage = field(default_factory=at.Usage)
    context_sent: bool = False
    batch_id: str | None = None  # the parent's batch that started this run


class RunTracer:
    """Turns one run's events into spans (subscribe `on_event` to the run's bus; `close` at its end).

    Args:
        tracer: The OpenTelemetry tracer to start spans with.
        providers: ``gen_ai.provider.name`` by model name (the run's clients).
        content: Write prompt and completion text (the conventions' content switch).
        parent: The context the top-level run's span is a child of (the caller's current span).
    """

    def __init__(
        self,
        tracer: trace.Tracer,
        providers: dict[str, str],
        *,
        content: bool = False,
        parent: otel_context.Context | None = None,
    ) -> None:
        self.tracer = tracer
        self.providers = providers
        self.content = content
        self.parent = parent if parent is not None else otel_context.get_current()
        self.runs: dict[str, _Run] = {}
        self.conversation: str | None = None

    # -- the stream -------------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """Handle one event of the run (a callback of its `EventBus`)."""
        if isinstance(event, RunStarted):
            self._run_started(event)
            return
        run = self.runs.get(event.run_id)
        if run is None:
            return
        if isinstance(event, RootCall):
            self._root_call(run, event)
        elif isinstance(event, CellExecuted):
            self._cell(run, event)
        elif isinstance(event, SubCallStarted):
            self._sub_call_started(run, event)
        elif isinstance(event, SubCallFinished):
            self._sub_call_finished(run, event)
        elif isinstance(event, BudgetEvent):
            run.span.add_event(
                "rlm.budget",
                {"rlm.budget.resource": event.resource, "rlm.budget.used": event.used,
                 "rlm.budget.limit": -1.0 if event.limit is None else event.limit,
                 "rlm.budget.exhausted": event.exhausted},
                timestamp=_ns(event.time),
            )  # fmt: skip
        elif isinstance(event, ConcurrencyCut):
            run.span.add_event(
                "rlm.concurrency_cut",
                {"rlm.endpoint": event.endpoint, "rlm.limit": event.limit, "rlm.ceiling": event.ceiling},
                timestamp=_ns(event.time),
            )
        elif isinstance(event, RunFinished):
            self._run_finished(run, event)

    def close(self) -> None:
        """End every span still open (a run that ended without its last event), marked as an error."""
        for run_id in list(self.runs):
            run = self.runs.pop(run_id)
            self._end_children(run, None, "the run ended before its spans did")
            run.span.set_status(Status(StatusCode.ERROR, "the run ended before its spans did"))
            run.span.set_attribute(at.ERROR_TYPE, "incomplete")
            run.span.end()

    # -- spans of a run ---------------------------------------------------------------------------
    def _start(self, name: str, parent: Span | None, start: float, attributes: dict[str, Any], **kw: Any) -> Span:
        context = self.parent if parent is None else trace.set_span_in_context(parent)
        return self.tracer.start_span(name, context=context, start_time=_ns(start), attributes=attributes, **kw)

    def _run_started(self, event: RunStarted) -> None:
        rerouted = self.runs.pop(event.run_id, None)
        if rerouted is not None:
            # The direct route's prompt was refused as too long and the RLM takes the run over: the direct
            # attempt's span ends here, saying so, and the RLM's starts.
            self._end_children(rerouted, event.time, "the direct prompt was refused", "rerouted")
            rerouted.span.set_attribute("rlm.rerouted", event.route_reason or "")
            rerouted.span.end(end_time=_ns(event.time))
        parent_run = self.runs.get(event.parent_run_id) if event.parent_run_id else None
        parent: Span | None = None
        if parent_run is not None:
            parent = self._holder(parent_run, event.batch_id, event.batch_size, event.time)
        if self.conversation is None:
            self.conversation = event.run_id
        description = event.context_description
        attributes: dict[str, Any] = {
            at.OPERATION: "invoke_agent",
            at.AGENT_NAME: "rlm",
            at.CONVERSATION: self.conversation,
            at.REQUEST_MODEL: event.root_model,
            at.PROVIDER: self.providers.get(event.root_model, "unknown"),
            "rlm.run_id": event.run_id,
            "rlm.depth": event.depth,
            "rlm.route": event.route,
            "rlm.sandbox": event.sandbox,
            "rlm.isolation": event.isolation,
            "rlm.max_iterations": event.max_iterations,
            "rlm.max_depth": event.max_depth,
            "rlm.context.type": str(description.get("type", "")),
            "rlm.context.chars": int(description.get("total_chars", 0) or 0),
        }
        if event.parent_run_id:
            attributes["rlm.parent_run_id"] = event.parent_run_id
        if self.content and event.query:
            attributes[at.INPUT_MESSAGES] = at.messages_json([at.text_parts("user", event.query)])
        span = self._start("invoke_agent rlm", parent, event.time, attributes)
        self.runs[event.run_id] = _Run(span, event.parent_run_id, event.query, event.time, batch_id=event.batch_id)

    def _holder(self, run: _Run, batch_id: str | None, batch_size: int, when: float) -> Span:
        """The span a call of `run` hangs under: its batch's, else the running cell's (opened if need be)."""
        cell = self._cell_span(run)
        if batch_id is None:
            return cell
        batch = run.batches.get(batch_id)
        if batch is None:
            attributes = {"rlm.batch.id": batch_id, "rlm.batch.size": batch_size}
            batch = _Batch(self._start("rlm.batch", cell, when, attributes), batch_size, last_end=when)
            run.batches[batch_id] = batch
        return batch.span

    def _cell_span(self, run: _Run) -> Span:
        if run.cell is None:
            attributes = {at.OPERATION: "execute_tool", at.TOOL_NAME: "repl", at.TOOL_TYPE: "function"}
            run.cell = self._start(
                "execute_tool repl", self._iteration(run, run.iteration, run.cursor), run.cursor, attributes
            )
        return run.cell

    def _iteration(self, run: _Run, number: int, start: float) -> Span:
        """The span of root turn `number` (the previous one ends where this one starts)."""
        if run.iteration_span is not None and run.iteration == number:
            return run.iteration_span
        if run.iteration_span is not None:
            run.iteration_span.end(end_time=_ns(start))
        run.iteration = number
        run.iteration_span = self._start("rlm.iteration", run.span, start, {"rlm.iteration": number})
        return run.iteration_span

    def _root_call(self, run: _Run, event: RootCall) -> None:
        start = event.time - event.duration
        iteration = self._iteration(run, event.iteration, start)
        attributes = self._model_attributes(event)
        attributes["rlm.iteration"] = event.iteration
        if self.content:
            attributes.update(self._root_content(run, event))
        span = self._start(f"chat {event.model}", iteration, start, attributes, kind=SpanKind.CLIENT)
        span.end(end_time=_ns(event.time))
        self._count(run, attributes)
        run.cursor = event.time

    def _root_content(self, run: _Run, event: RootCall) -> dict[str, Any]:
        system = [m["content"] for m in event.messages_sent if m["role"] == "system"]
        sent: list[dict[str, Any]] = []
        for message in event.messages_sent:
            if message["role"] == "system":
                continue
            text = message["content"]
            if message["role"] == "user" and not run.context_sent:
                # The first user message describes the context (a preview, its keys): only the question goes.
                run.context_sent = True
                text = CONTEXT_QUESTION.format(placeholder=at.CONTEXT_PLACEHOLDER, query=run.query or "")
            sent.append(at.text_parts(message["role"], text))
        out: dict[str, Any] = {
            at.INPUT_MESSAGES: at.messages_json(sent),
            at.OUTPUT_MESSAGES: at.messages_json([at.text_parts("assistant", event.reply, finish_reason="stop")]),
        }
        if system:
            out[at.SYSTEM_INSTRUCTIONS] = at.messages_json(
                [{"type": "text", "content": cut(text, at.MAX_CONTENT_CHARS)} for text in system]
            )
        return out

    def _cell(self, run: _Run, event: CellExecuted) -> None:
        attributes: dict[str, Any] = {
            "rlm.iteration": event.iteration,
            "rlm.cell.index": event.index,
            "rlm.cell.duration": event.duration,
            "rlm.cell.timed_out": event.timed_out,
            "rlm.cell.variables_lost": event.variables_lost,
            "rlm.cell.final": event.final,
        }
        if self.content:
            attributes[at.TOOL_ARGUMENTS] = cut(event.code, at.MAX_CONTENT_CHARS)
            attributes[at.TOOL_RESULT] = cut(event.output, at.MAX_CONTENT_CHARS)
        if run.cell is None:
            start = max(run.cursor, event.time - event.duration)
            parent = self._iteration(run, event.iteration, start)
            base = {at.OPERATION: "execute_tool", at.TOOL_NAME: "repl", at.TOOL_TYPE: "function"}
            run.cell = self._start("execute_tool repl", parent, start, base)
        cell, run.cell = run.cell, None
        cell.set_attributes(attributes)
        for batch_id in list(run.batches):
            batch = run.batches.pop(batch_id)
            batch.span.end(end_time=_ns(batch.last_end))
        if event.error is not None or event.timed_out:
            kind = "timeout" if event.timed_out else at.error_type(event.error or "")
            cell.set_attribute(at.ERROR_TYPE, kind)
            detail = cut(event.error or "", at.MAX_CONTENT_CHARS) if self.content else f"the cell failed ({kind})"
            cell.set_status(Status(StatusCode.ERROR, detail))
        cell.end(end_time=_ns(event.time))
        run.cursor = event.time

    def _sub_call_started(self, run: _Run, event: SubCallStarted) -> None:
        parent = self._holder(run, event.batch_id, event.batch_size, event.time)
        if event.call_kind == "tool":
            name = f"execute_tool {event.model}"
            attributes: dict[str, Any] = {at.OPERATION: "execute_tool", at.TOOL_NAME: event.model,
                                          at.TOOL_TYPE: "function", at.TOOL_CALL_ID: event.call_id}  # fmt: skip
            if self.content:
                attributes[at.TOOL_ARGUMENTS] = cut(event.prompt, at.MAX_CONTENT_CHARS)
            kind = SpanKind.INTERNAL
        else:
            name = f"chat {event.model}"
            attributes = {at.OPERATION: "chat", at.REQUEST_MODEL: event.model, "rlm.call_id": event.call_id,
                          at.PROVIDER: self.providers.get(event.model, "unknown")}  # fmt: skip
            if self.content:
                attributes[at.INPUT_MESSAGES] = at.messages_json([at.text_parts("user", event.prompt)])
            kind = SpanKind.CLIENT
        if event.batch_id is not None:
            attributes["rlm.batch.id"] = event.batch_id
        run.calls[event.call_id] = self._start(name, parent, event.time, attributes, kind=kind)

    def _sub_call_finished(self, run: _Run, event: SubCallFinished) -> None:
        span = run.calls.pop(event.call_id, None)
        if span is None:
            return
        if event.call_kind != "tool":
            attributes = self._model_attributes(event)
            attributes.pop(at.REQUEST_MODEL)
            span.set_attributes(attributes)
            self._count(run, attributes)
            if self.content and event.error is None:
                reply = at.text_parts("assistant", event.response, finish_reason="stop")
                span.set_attribute(at.OUTPUT_MESSAGES, at.messages_json([reply]))
        elif self.content and event.error is None:
            span.set_attribute(at.TOOL_RESULT, cut(event.response, at.MAX_CONTENT_CHARS))
        if event.error is not None:
            span.set_attribute(at.ERROR_TYPE, "sub_call_error")
            span.set_status(Status(StatusCode.ERROR, cut(event.error, 2000) if self.content else "the call failed"))
        span.end(end_time=_ns(event.time))
        self._member_done(run, event.batch_id, event.time)

    @staticmethod
    def _member_done(run: _Run, batch_id: str | None, when: float) -> None:
        """One call or nested run of a batch ended: the batch ends with its last."""
        batch = run.batches.get(batch_id) if batch_id else None
        if batch is None:
            return
        batch.finished += 1
        batch.last_end = max(batch.last_end, when)
        if batch.finished >= batch.size:
            run.batches.pop(str(batch_id)).span.end(end_time=_ns(batch.last_end))

    def _run_finished(self, run: _Run, event: RunFinished) -> None:
        self.runs.pop(event.run_id, None)
        reason = event.finish_reason
        self._end_children(run, event.time, f"the run ended ({reason}) before this finished", reason)
        run.span.set_attributes(
            {"rlm.finish_reason": reason, "rlm.iterations": event.iterations, "rlm.duration": event.duration,
             **run.usage.attributes()}
        )  # fmt: skip
        if reason not in ANSWERED:
            run.span.set_attribute(at.ERROR_TYPE, reason)
            detail = f"{reason}: {cut(event.error or '', 2000)}" if self.content else f"the run ended with {reason}"
            run.span.set_status(Status(StatusCode.ERROR, detail))
        elif self.content and event.response:
            reply = at.text_parts("assistant", event.response, finish_reason="stop")
            run.span.set_attribute(at.OUTPUT_MESSAGES, at.messages_json([reply]))
        run.span.end(end_time=_ns(event.time))
        parent = self.runs.get(run.parent_run_id) if run.parent_run_id else None
        if parent is not None:
            parent.usage.add(run.usage)
            self._member_done(parent, run.batch_id, event.time)

    def _end_children(self, run: _Run, when: float | None, why: str, kind: str = "incomplete") -> None:
        """End what a run left open: calls and a cell it never finished are errors; batches and its turn end."""
        end = None if when is None else _ns(when)
        for span in [*run.calls.values(), *([run.cell] if run.cell is not None else [])]:
            span.set_attribute(at.ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, why))
            span.end(end_time=end)
        for batch in run.batches.values():
            batch.span.end(end_time=end)
        if run.iteration_span is not None:
            run.iteration_span.end(end_time=end)
        run.calls.clear()
        run.batches.clear()
        run.cell = run.iteration_span = None

    # -- attributes -------------------------------------------------------------------------------
    def _model_attributes(self, event: RootCall | SubCallFinished) -> dict[str, Any]:
        return {
            at.OPERATION: "chat",
            at.REQUEST_MODEL: event.model,
            at.RESPONSE_MODEL: event.model,
            at.PROVIDER: self.providers.get(event.model, "unknown"),
            at.INPUT_TOKENS: event.input_tokens,
            at.OUTPUT_TOKENS: event.output_tokens,
            at.CACHE_READ_TOKENS: event.cache_read_tokens,
            at.CACHE_WRITE_TOKENS: event.cache_write_tokens,
            at.COST: round(event.cost, 8),
        }

    @staticmethod
    def _count(run: _Run, attributes: dict[str, Any]) -> None:
        run.usage.add(
            at.Usage(attributes[at.INPUT_TOKENS], attributes[at.OUTPUT_TOKENS], attributes[at.CACHE_READ_TOKENS],
                   attributes[at.CACHE_WRITE_TOKENS], attributes[at.COST])
        )  # fmt: skip


CONTEXT_QUESTION = "{placeholder}\n\nThe question to answer:\n{query}"
