"""The direct route: a prompt that fits comfortably is one plain call to the root model, not the RLM loop.

An RLM pays for its loop (a root turn that writes code, a sandbox, a final turn) on every input; for a short
one the plain model is as good, faster and cheaper (issue 50). With ``direct_below_tokens`` set, `choose_route`
counts the prompt the direct call would send, as the engine counts every prompt (`core.tokens`), and a
prompt under the threshold runs as a `DirectRun`: the context and question (or a chat adapter's
conversation, as chat messages) in one call through the engine's one path for model calls (`call_model`:
the budget, the call cache, the endpoint's limit, tracing and usage as for any root call). Its reply is the
answer, streamed as `AnswerDelta` events as it arrives; a typed answer (``output_schema``) is checked and
sent back when invalid, and the caller's tools are offered as ``CALL_TOOL`` lines, checked as the RLM's are.

A direct call the provider refuses as too long for the model's window raises `DirectRefused`: the run goes
on as an RLM, once, and says so (`RouteChoice.fell_back`).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import rlm_adapters.core.engine.prompts as prompts
from rlm_adapters.core.context import RunContext
from rlm_adapters.core.engine.budget import BudgetExhausted
from rlm_adapters.core.engine.loop import LevelProgress, finish_event, level_result, root_call
from rlm_adapters.core.engine.parsing import QuoteCheck
from rlm_adapters.core.engine.tool_calls import ToolOffer
from rlm_adapters.core.engine.tool_turn import MAX_TOOL_CALL_RETRIES, TurnCalls
from rlm_adapters.core.engine.tree import RunTree
from rlm_adapters.core.events import AnswerDelta, BudgetEvent, FinishReason, Route, RunStarted
from rlm_adapters.core.lm import CallProgress, LMResponse, Message
from rlm_adapters.core.output import AnswerCheck, OutputSchema
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.sandbox import FinalAnswer
from rlm_adapters.core.settings import RLMSettings
from rlm_adapters.core.tokens import estimate_tokens, tokens_for_chars
from rlm_adapters.errors import ModelError, RLMError, is_context_limit

# A typed answer a model wrapped in one code fence (```json ... ```) is read without it.
_FENCED = re.compile(r"\A\s*```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)
NO_SANDBOX = "none"  # the direct route's sandbox kind and isolation level: it starts no sandbox


@dataclass(frozen=True)
class RouteChoice:
    """Which route a run takes, and why.

    Attributes:
        route: ``direct`` (one plain call) or ``rlm``.
        reason: Why, in one line (the prompt's tokens against ``direct_below_tokens``).
        prompt_tokens: The direct prompt's tokens, as the engine counts them (None when not counted: the
            route is off, or the context alone is over the threshold).
        threshold: ``direct_below_tokens`` (None: the direct route is off).
        messages: The direct call's messages (empty for the RLM route).
    """

    route: Route
    reason: str
    prompt_tokens: int | None = None
    threshold: int | None = None
    messages: list[Message] = field(default_factory=list, repr=False, compare=False)

    def fell_back(self, why: str) -> RouteChoice:
        """The RLM route after the model refused this direct prompt as too long (`why`: its error)."""
        return replace(
            self, route="rlm", messages=[], reason=f"{self.reason}; the model refused it as too long, so the "
            f"RLM answered instead ({why})"
        )  # fmt: skip

    def metadata(self) -> dict[str, Any]:
        """What a result's ``metadata`` says of the route."""
        said: dict[str, Any] = {"route": self.route, "route_reason": self.reason}
        if self.threshold is not None:
            said["direct_below_tokens"] = self.threshold
        if self.prompt_tokens is not None:
            said["prompt_tokens"] = self.prompt_tokens
        return said


class DirectRefused(RLMError):
    """The model refused the direct prompt as too long for its window: the run goes on as an RLM."""


def choose_route(
    settings: RLMSettings,
    context: RunContext,
    query: str | None,
    *,
    chat: Sequence[Mapping[str, Any]] | None,
    system: str | None,
    in_session: bool,
) -> RouteChoice:
    """The route of a top-level run, and the direct call's messages when it is direct.

    Args:
        settings: The run's settings (``direct_below_tokens``).
        context: The validated context.
        query: The question.
        chat: The conversation the context and question were made from (a chat adapter's), sent as chat
            messages instead of them.
        system: The direct call's system message (instructions, typed-answer and tool sections), if any.
        in_session: The run is a persistent session's turn (its REPL holds the context: always the RLM).
    """
    threshold = settings.direct_below_tokens
    if threshold is None:
        return RouteChoice("rlm", "direct_below_tokens is not set")
    if in_session:
        return RouteChoice("rlm", "a persistent session keeps its context in its REPL", threshold=threshold)
    at_least = tokens_for_chars(context.size)
    if at_least >= threshold:  # a long context is never rendered as a prompt only to be measured
        return RouteChoice(
            "rlm",
            f"the context alone is about {at_least:,} tokens, not under direct_below_tokens={threshold:,}",
            threshold=threshold,
        )
    messages = direct_messages(context, query, chat, system)
    tokens = sum(estimate_tokens(m["content"]) for m in messages)  # as `call_model` counts a prompt
    if tokens >= threshold:
        return RouteChoice(
            "rlm", f"the prompt is {tokens:,} tokens, not under direct_below_tokens={threshold:,}", tokens, threshold
        )
    reason = f"the prompt is {tokens:,} tokens, under direct_below_tokens={threshold:,}"
    return RouteChoice("direct", reason, tokens, threshold, messages)


def direct_messages(
    context: RunContext, query: str | None, chat: Sequence[Mapping[str, Any]] | None, system: str | None
) -> list[Message]:
    """The direct call's messages: the system message, then the conversation, or the context and question."""
    messages: list[Message] = [{"role": "system", "content": system}] if system else []
    if chat is not None:
        return messages + [_chat_message(entry) for entry in chat]
    text = context_text(context.value)
    return [*messages, {"role": "user", "content": f"{text}\n\n{query}" if query else text}]


def context_text(value: Any) -> str:
    """A context as prompt text: a string as it is, a list of strings one after another, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "\n\n".join(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _chat_message(entry: Mapping[str, Any]) -> Message:
    """One conversation entry as a chat message; tool calls and results as the direct route's text protocol."""
    role, content = str(entry.get("role", "user")), str(entry.get("content") or "")
    if role == "assistant":
        calls = [
            f"CALL_TOOL {call.get('name')} {json.dumps(call.get('args') or {}, ensure_ascii=False)}"
            for call in entry.get("tool_calls") or ()
            if isinstance(call, Mapping)
        ]
        return {"role": "assistant", "content": "\n".join(filter(None, [content, *calls]))}
    if role == "tool":
        name = entry.get("name") or "a tool"
        return {"role": "user", "content": f"Result of {name} (call {entry.get('tool_call_id')}):\n{content}"}
    return {"role": "system" if role == "system" else "user", "content": content}


def direct_system(
    instructions: Sequence[str | None], schema: OutputSchema | None, offer: ToolOffer | None
) -> str | None:
    """The direct call's system message: the caller's instructions, then what a typed answer or tools ask."""
    parts = [*instructions]
    if schema is not None:
        parts.append(prompts.direct_schema_section(json.dumps(schema.json_schema, indent=1)))
    if offer is not None:
        parts.append(prompts.direct_tools_section(offer))
    return "\n\n".join(part for part in parts if part) or None


def unfenced(reply: str) -> str:
    """A reply without the one code fence a model may wrap a JSON answer in."""
    match = _FENCED.match(reply)
    return match.group(1) if match else reply


class _Stream:
    """Hands the direct reply's pieces on as `AnswerDelta` events, in order, from the try that streamed first.

    A retried call starts its reply again; what was streamed cannot be taken back, so only the first try
    that streamed is handed on, and once the reply is whole the rest of it (or all of it, for a client that
    does not stream) follows as one piece.
    """

    def __init__(self, run: DirectRun) -> None:
        self.run = run
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.source: CallProgress | None = None
        self.sent: list[str] = []  # joined once at the end: a reply is thousands of pieces
        self.pump = asyncio.ensure_future(self._pump())

    def piece(self, progress: CallProgress, text: str) -> None:
        if self.source is None:
            self.source = progress
        if progress is self.source:
            self.sent.append(text)
            self.queue.put_nowait(text)

    async def _pump(self) -> None:
        while (text := await self.queue.get()) is not None:
            await self.run.emit_piece(text)

    async def finish(self, response: LMResponse) -> None:
        """Wait until every piece is handed on; then the rest of the reply."""
        self.queue.put_nowait(None)
        await self.pump
        reply, sent = response.text, "".join(self.sent)
        if reply.startswith(sent) and len(reply) > len(sent):
            await self.run.emit_piece(reply[len(sent) :])

    def cancel(self) -> None:
        self.pump.cancel()


class DirectRun:
    """One top-level run on the direct route: the root model's reply is the answer.

    Args:
        tree: The run's shared state (budget, bus, call cache, deadline).
        context: The validated context (described in `RunStarted`, quoted calls refused against it).
        query: The question.
        choice: The route chosen, with the call's messages.
        run_id: The run's id.
        check: A typed answer's check (``output_schema``).
        offer: The caller's tools.
        output_retries: Invalid typed answers sent back before the run fails.
        is_quoted: Whether a line repeats the context (a quoted ``CALL_TOOL`` line is not a call).
    """

    def __init__(
        self,
        tree: RunTree,
        context: RunContext,
        query: str | None,
        choice: RouteChoice,
        *,
        run_id: str,
        check: AnswerCheck | None,
        offer: ToolOffer | None,
        output_retries: int,
        is_quoted: QuoteCheck,
    ) -> None:
        self.tree = tree
        self.context = context
        self.query = query
        self.choice = choice
        self.run_id = run_id
        self.check = check
        self.turn = TurnCalls(offer) if offer is not None else None
        self.output_retries = output_retries
        self.is_quoted = is_quoted
        self.progress = LevelProgress()
        self.limit: str | None = None

    @property
    def _ids(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "depth": 0, "parent_run_id": None}

    async def emit_piece(self, text: str) -> None:
        """Hand one piece of the answer to the run's consumers."""
        await self.tree.bus.emit(AnswerDelta(**self._ids, text=text))

    async def run(self) -> RLMResult:
        """Ask the root model; its reply is the answer (checked, when typed or a tool call).

        Raises:
            DirectRefused: The model refused the prompt as too long (nothing was answered: the RLM goes on).
        """
        started = time.perf_counter()
        client = self.tree.root_client
        await self.tree.bus.emit(
            RunStarted(
                **self._ids,
                query=self.query,
                context_description=self.context.description,
                root_model=client.model_name,
                sub_models=[],
                sandbox=NO_SANDBOX,
                isolation=NO_SANDBOX,
                max_iterations=1,
                max_depth=0,
                route="direct",
                route_reason=self.choice.reason,
            )
        )
        finish: FinishReason = "error"
        response, error = "", None
        try:
            finish, response, error = await self._answer()
        except BudgetExhausted as exc:
            finish, response, error = exc.finish_reason, self.progress.partial_answer(), str(exc)
            self.limit = exc.resource
            await self.tree.bus.emit(
                BudgetEvent(
                    **self._ids, resource=exc.resource, used=exc.used, limit=exc.limit, exhausted=True, message=str(exc)
                )
            )
        except DirectRefused:
            raise
        except (ModelError, RLMError) as exc:
            finish, response, error = "error", self.progress.partial_answer(), str(exc)
        except asyncio.CancelledError:
            await self._finished("cancelled", self.progress.partial_answer(), "the run was cancelled", started)
            raise
        await self._finished(finish, response, error, started)
        ended = (finish, response, error, started)
        return level_result(self.tree, self._ids, self.progress, self.turn, ended, NO_SANDBOX, NO_SANDBOX, self.limit)

    async def _finished(self, finish: FinishReason, response: str, error: str | None, started: float) -> None:
        await finish_event(self.tree, self._ids, self.progress, finish, response, error, started)

    async def _answer(self) -> tuple[FinishReason, str, str | None]:
        messages = list(self.choice.messages)
        new = list(messages)
        # Each reply that does not fit goes back once per retry the typed answer or the tool calls allow.
        for _ in range(1 + self.output_retries + MAX_TOOL_CALL_RETRIES):
            reply = await self._call(messages, new)
            self.progress.last_prose = reply
            problem: str | None = None
            if self.turn is not None:
                self.turn.begin([*(m["content"] for m in messages), reply])
                self.turn.add_text(reply, self.is_quoted)
                settled = await self.turn.settle(True, self.tree.within_deadline)
                if settled.action == "finish":
                    return "tool_calls", "", None
                if settled.action == "fail":
                    return "error", reply, settled.message
                if settled.action == "retry":
                    problem = settled.message
            if problem is None and self.check is not None:
                final = FinalAnswer(unfenced(reply))
                problem = await self._validate(final)
                if problem is None:
                    self.progress.final = final
                    return "final", final.text, None
                self.progress.validation_retries += 1
                if self.progress.validation_retries > self.output_retries:
                    self.progress.final = final
                    tries = self.progress.validation_retries
                    return "error", final.text, f"the final answer is invalid after {tries} tries: {problem}"
                problem = prompts.direct_retry(problem)
            if problem is None:
                return "final", reply, None
            new = [{"role": "assistant", "content": reply}, {"role": "user", "content": problem}]
            messages += new
        return "error", self.progress.last_prose, "the reply still did not fit after its retries"

    async def _validate(self, final: FinalAnswer) -> str | None:
        """The typed answer's check, on a worker thread under the run's deadline (as the loop's)."""
        assert self.check is not None
        check = self.check
        problem: str | None = await self.tree.within_deadline(asyncio.to_thread(check, final))
        return problem

    async def _call(self, messages: list[Message], new: list[Message]) -> str:
        self.tree.budget.check_time()
        self.progress.iterations += 1
        turn = self.progress.iterations
        plain = self.check is None and self.turn is None  # only a plain answer streams: the others are checked
        stream = _Stream(self) if plain else None
        try:
            response = await root_call(
                self.tree,
                self.tree.root_client,
                "root",
                self._ids,
                turn,
                messages,
                new,
                on_piece=stream.piece if stream is not None else None,
                before_log=stream.finish if stream is not None else None,
            )
        except ModelError as exc:
            # A prompt over the model's window is refused before any of the reply: the RLM takes the run over.
            if turn == 1 and is_context_limit(exc) and (stream is None or not stream.sent):
                raise DirectRefused(str(exc)) from exc
            raise
        finally:
            if stream is not None:
                stream.cancel()
        return response.text
