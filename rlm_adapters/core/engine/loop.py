"""The RLM loop for one run level: ask the root model, run its code, feed back, until a final answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import rlm_adapters.core.engine.prompts as prompts
from rlm_adapters.core.cleanup import close_shielded
from rlm_adapters.core.context import RunContext
from rlm_adapters.core.engine.broker import Broker
from rlm_adapters.core.engine.budget import BudgetExhausted
from rlm_adapters.core.engine.level_sandbox import LevelSandbox, NotOpened, OwnSandbox, SandboxLease
from rlm_adapters.core.engine.model_call import CutCall, PieceListener, call_model, reply_record
from rlm_adapters.core.engine.parsing import clean_answer, context_texts, quote_check, strip_code_blocks
from rlm_adapters.core.engine.tool_calls import ToolOffer
from rlm_adapters.core.engine.tool_turn import TurnCalls
from rlm_adapters.core.engine.tree import RunTree
from rlm_adapters.core.events import BudgetEvent, FinishReason, RootCall, RunFinished, RunStarted
from rlm_adapters.core.lm import LMResponse, Message, ModelClient
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.sandbox import CallError, CellResult, FinalAnswer, Sandbox, SandboxSetup, encode_value
from rlm_adapters.core.settings import RLMSettings
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.core.trajectory import new_run_id
from rlm_adapters.errors import ModelError, RLMError, SandboxError

# Checks a final answer (structured output): returns an error message for the model, or None when valid.
FinalValidator = Callable[[FinalAnswer], str | None]


class LimitReached(Exception):
    """A limit the loop checks after a turn (`max_tokens`, `max_errors`): ends the run with a finish reason."""

    def __init__(self, finish: FinishReason, limit: str, message: str) -> None:
        super().__init__(message)
        self.finish: FinishReason = finish
        self.limit = limit


@dataclass
class LevelProgress:
    """What one run level has done so far, for its result and its best partial answer."""

    iterations: int = 0
    consecutive_errors: int = 0
    turn_error: str | None = None
    last_prose: str = ""
    last_output: str = ""
    validation_retries: int = 0
    final: FinalAnswer | None = None
    notes: list[str] = field(default_factory=list)

    def partial_answer(self) -> str:
        return self.last_prose or self.last_output[:2000]


def check_turn_limits(settings: RLMSettings, progress: LevelProgress, used_tokens: int, depth: int) -> None:
    """The reference's per-turn limits: consecutive turns with a cell error, total tokens of the tree.

    Raises:
        LimitReached: `max_errors` turns in a row had a cell error, or the top level is over `max_tokens`.
    """
    progress.consecutive_errors = progress.consecutive_errors + 1 if progress.turn_error else 0
    if settings.max_errors is not None and progress.consecutive_errors >= settings.max_errors:
        raise LimitReached(
            "error",
            "max_errors",
            f"max_errors={settings.max_errors} reached: {progress.consecutive_errors} turns in a row had a "
            f"cell error; the last: {progress.turn_error}",
        )
    if depth == 0 and settings.max_tokens is not None and used_tokens > settings.max_tokens:
        raise LimitReached(
            "budget", "max_tokens", f"max_tokens={settings.max_tokens:,} reached: the run used {used_tokens:,} tokens"
        )


# The same turn (the same cells, or the same reply when no cell ran) this many times in a row is named to the
# model; this many more ends the run: a model that repeats itself will not stop doing so on its own.
REPEATS_NAMED = 3
REPEATS_ENDING = 5


class RepeatWatch:
    """Counts turns in a row whose code (or reply, when none ran) is the same as the turn before."""

    def __init__(self) -> None:
        self.last: list[str] | None = None
        self.count = 0

    def see(self, turn: list[str]) -> list[str]:
        """Record one turn; returns the line for the model once it repeats (`REPEATS_NAMED` in a row).

        Raises:
            LimitReached: the same turn `REPEATS_ENDING` times in a row.
        """
        signature = [part.strip() for part in turn]
        self.count = self.count + 1 if signature == self.last else 1
        self.last = signature
        if self.count >= REPEATS_ENDING:
            raise LimitReached(
                "error",
                "repeated_turn",
                f"the root model repeated the same turn {self.count} times in a row (the same code, or the same "
                "reply with no code); its output would not change, so the run ended",
            )
        if self.count == REPEATS_NAMED:
            return [prompts.repeated_turn(self.count)]
        return []


async def root_call(
    tree: RunTree,
    client: ModelClient,
    role: Any,
    ids: dict[str, Any],
    iteration: int,
    messages: list[Message],
    new_messages: list[Message],
    *,
    on_piece: PieceListener | None = None,
    before_log: Callable[[LMResponse], Awaitable[None]] | None = None,
) -> LMResponse:
    """One root model call (`call_model`) and its `RootCall` record: the reply's, or a cut call's as far as it got.

    Args:
        tree: The run's shared state.
        client: The root model.
        role: Whose budget it spends.
        ids: The calling level's ids (run, depth, parent).
        iteration: The turn's number in the log.
        messages: The conversation to send.
        new_messages: Its messages new since the last turn (what the log keeps).
        on_piece: Told each streamed piece of the reply (the direct route's answer).
        before_log: Awaited with the reply before its record is emitted (the direct route's last pieces).
    """
    started = time.perf_counter()
    sent = [{"role": m["role"], "content": m["content"]} for m in new_messages]
    cut: list[CutCall] = []

    async def log(**call: Any) -> None:
        await tree.bus.emit(
            RootCall(**ids, iteration=iteration, messages_sent=sent, duration=time.perf_counter() - started, **call)
        )

    try:
        response, cost = await call_model(tree, client, messages, role, **ids, on_cut=cut.append, on_piece=on_piece)
    except BaseException:
        if cut:  # counted in the usage; the log shows the call's end too, as far as it got
            ended = cut[0]
            await log(
                reply=ended.text,
                model=client.model_name,
                input_tokens=ended.input_tokens,
                output_tokens=ended.output_tokens,
                cost=ended.cost,
                cut=ended.reason,
            )
        raise
    if before_log is not None:
        await before_log(response)
    await log(reply=response.text, **reply_record(response, cost))
    return response


async def finish_event(
    tree: RunTree,
    ids: dict[str, Any],
    progress: LevelProgress,
    finish: FinishReason,
    response: str,
    error: str | None,
    started: float,
) -> None:
    """Emit a run level's `RunFinished` (the RLM's and the direct route's)."""
    await tree.bus.emit(
        RunFinished(
            **ids,
            response=response,
            finish_reason=finish,
            iterations=progress.iterations,
            usage=tree.budget.usage.to_dict(),
            duration=time.perf_counter() - started,
            error=error,
        )
    )


def level_result(
    tree: RunTree,
    ids: dict[str, Any],
    progress: LevelProgress,
    turn: TurnCalls | None,
    ended: tuple[FinishReason, str, str | None, float],
    sandbox: str,
    isolation: str,
    limit: str | None,
) -> RLMResult:
    """A run level's result (the RLM's and the direct route's).

    Args:
        tree: The run's shared state (its usage).
        ids: The level's ids.
        progress: What the level did.
        turn: Its calls of the caller's tools, if offered.
        ended: How it ended: the finish reason, the answer, the error and when it started.
        sandbox: Its sandbox kind (``none`` on the direct route).
        isolation: The sandbox's isolation level.
        limit: The limit that ended it, if one did.
    """
    finish, response, error, started = ended
    calls = turn is not None and finish == "tool_calls"
    return RLMResult(
        response=response,
        finish_reason=finish,
        usage_summary=tree.budget.usage,
        iterations=progress.iterations,
        run_id=ids["run_id"],
        execution_time=time.perf_counter() - started,
        error=error,
        final_value=progress.final.value if progress.final else None,
        tool_calls=list(turn.accepted) if turn is not None and calls else [],
        invalid_tool_calls=list(turn.rejected) if turn is not None and calls else [],
        metadata={
            "sandbox": sandbox,
            "isolation": isolation,
            "depth": ids["depth"],
            **({"limit": limit} if limit else {}),
        },
    )


class RunLevel:
    """One RLM run at one depth, with its own sandbox and message history."""

    def __init__(
        self,
        tree: RunTree,
        context: RunContext,
        query: str | None,
        *,
        depth: int = 0,
        parent_run_id: str | None = None,
        run_id: str | None = None,
        instructions: str | None = None,
        final_validator: FinalValidator | None = None,
        model: str | None = None,
        lease: SandboxLease | None = None,
        validation_retries: int = 1,
        batch: tuple[str | None, int] = (None, 1),
        tool_offer: ToolOffer | None = None,
        route_reason: str | None = None,
    ) -> None:
        self.tree = tree
        self.route_reason = route_reason  # why the top level took the RLM route (`core.engine.direct`)
        self.batch = batch
        self.context = context
        self.query = query
        self.depth = depth
        self.parent_run_id = parent_run_id
        self.run_id = run_id or new_run_id()
        self.instructions = instructions
        self.final_validator = final_validator
        self.validation_retries = validation_retries
        self.role: Any = "root" if depth == 0 else "sub"
        # A nested RLM runs on the root model unless `rlm_query(..., model=)` names another (as the reference).
        self.client: ModelClient = tree.nested_client(model)
        # Only the top level may run in a persistent session's sandbox; every other level has its own.
        self.lease: SandboxLease = lease if lease is not None and depth == 0 else OwnSandbox(tree, self.run_id)
        # The caller's tools: only the top-level run may end its turn by calling them.
        self.turn = TurnCalls(tool_offer) if tool_offer is not None and depth == 0 else None
        self.messages: list[Message] = []
        self.limit: str | None = None
        self.progress = LevelProgress()
        self.max_iterations = tree.settings.max_iterations  # the top level's may be raised by on_budget
        self._repeats = RepeatWatch()
        # A FINAL( line that repeats text of the context is a quote, never the model's answer.
        self._is_quoted = quote_check(lambda: context_texts(self.context.value))
        tree.max_depth_reached = max(tree.max_depth_reached, depth)

    def _record_cell(self, cell: CellResult) -> None:
        """What a cell leaves in the level's progress: its error marks the turn, its output the partial answer."""
        if cell.error:
            self.progress.turn_error = cell.error
        if cell.output.strip():
            self.progress.last_output = cell.output

    @property
    def _ids(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "depth": self.depth, "parent_run_id": self.parent_run_id}

    async def run(self) -> RLMResult:
        """Run to a final answer or until a limit ends it. Cancellation closes the sandbox and propagates."""
        started = time.perf_counter()
        settings = self.tree.settings
        description = self.context.description
        # A level's own sandbox opens behind its first root call, whose events wait for the run's start event;
        # a session's is acquired first (how many runs it holds goes into the first message).
        own = isinstance(self.lease, OwnSandbox)
        began = time.time()  # the start event says when the run began, even when it goes out later
        sandbox, counts = (None, (1, 0)) if own else await self.lease.acquire()
        cells = LevelSandbox(
            self.tree,
            sandbox,
            context=self.context,
            lease=self.lease,
            turn=self.turn,
            on_cell=self._record_cell,
            ids=self._ids,
            is_quoted=self._is_quoted,
        )
        tools = self.tree.tools_for(self.depth)

        def started_event(sandbox: Sandbox) -> RunStarted:
            return RunStarted(
                **self._ids,
                query=self.query,
                context_description=description,
                root_model=self.client.model_name,
                sub_models=[c.model_name for c in self.tree.sub_clients.values()] or [self.client.model_name],
                sandbox=sandbox.kind,
                isolation=sandbox.isolation,
                max_iterations=settings.max_iterations,
                max_depth=settings.max_depth,
                batch_id=self.batch[0],
                batch_size=self.batch[1],
                route_reason=self.route_reason,
                time=began,
            )

        async def announce(sandbox: Sandbox) -> None:
            await self.tree.bus.release(self.run_id, started_event(sandbox))

        broker = Broker(self.tree, self.run_id, self.depth, self._run_nested, self.parent_run_id)
        broker.tool_turn = self.turn
        setup = SandboxSetup(
            context=self.context,
            handler=broker.handle,
            tools={name: spec.description for name, spec in tools.items()},
            values={k: encode_value(v, k) for k, v in self.tree.values_for(self.depth)[0].items()},
            scratch=self.lease.scratch(),
        )
        # The worker starts while the first root call is in flight: its start-up hides behind that latency.
        if sandbox is None:
            self.tree.bus.hold(self.run_id)
            cells.open(setup, announce)
        else:
            await self.tree.bus.emit(started_event(sandbox))
            cells.start(setup)
        finish: FinishReason = "error"
        response = ""
        error: str | None = None
        broken = False
        try:
            finish, response, error = await self._iterate(cells, description, counts)
        except NotOpened:
            pass  # raised below, once the sandbox's lease is settled
        except LimitReached as exc:
            finish, response, error, self.limit = exc.finish, self.progress.partial_answer(), str(exc), exc.limit
        except BudgetExhausted as exc:
            finish, response, error = exc.finish_reason, self.progress.partial_answer(), str(exc)
            self.limit = exc.resource
            await self.tree.bus.emit(
                BudgetEvent(
                    **self._ids,
                    resource=exc.resource,
                    used=exc.used,
                    limit=exc.limit,
                    exhausted=True,
                    message=str(exc),
                )
            )
        except (ModelError, SandboxError, RLMError) as exc:
            finish, response, error = "error", self.progress.partial_answer(), str(exc)
            broken = isinstance(exc, SandboxError)
        except asyncio.CancelledError:
            broken = True
            await self._finish_event("cancelled", self.progress.partial_answer(), "the run was cancelled", started)
            raise
        finally:
            await close_shielded(cells.end(self.messages, broken))
        if cells.open_error is not None:
            # No sandbox, no run: the error is the caller's, as if it had come before the first root call,
            # whose reply (if it came) is in the budget's usage and the call cache.
            self.tree.bus.drop(self.run_id)
            raise cells.open_error
        await self._finish_event(finish, response, error, started)
        ended = (finish, response, error, started)
        return level_result(
            self.tree,
            self._ids,
            self.progress,
            self.turn,
            ended,
            cells.sandbox.kind,
            cells.sandbox.isolation,
            self.limit,
        )

    async def _finish_event(self, finish: FinishReason, response: str, error: str | None, started: float) -> None:
        await finish_event(self.tree, self._ids, self.progress, finish, response, error, started)

    async def _run_nested(
        self,
        context: RunContext,
        query: str | None,
        depth: int,
        parent_run_id: str,
        model: str | None = None,
        batch: tuple[str | None, int] = (None, 1),
    ) -> str:
        child = RunLevel(self.tree, context, query, depth=depth, parent_run_id=parent_run_id, model=model, batch=batch)
        result = await child.run()
        if result.finish_reason in ("budget", "timeout") and self.tree.budget.exhausted is not None:
            raise self.tree.budget.exhausted
        if result.finish_reason == "error" or (result.finish_reason != "final" and not result.response):
            # Becomes "Error: ..." in the REPL, like every failed sub-call, instead of a silent "".
            raise CallError(f"the nested RLM ended with {result.finish_reason}: {result.error or 'no answer'}")
        return result.response

    async def _root_call(
        self, messages: list[Message], new_messages: list[Message], *, iteration: int | None = None
    ) -> LMResponse:
        self.tree.budget.check_time()
        turn = self.progress.iterations if iteration is None else iteration
        return await root_call(self.tree, self.client, self.role, self._ids, turn, messages, new_messages)

    async def _iterate(
        self, cells: LevelSandbox, description: dict[str, Any], counts: tuple[int, int] = (1, 0)
    ) -> tuple[FinishReason, str, str | None]:
        settings = self.tree.settings
        nested_enabled = self.depth + 1 < settings.max_depth
        system = prompts.system_prompt(
            context_kind=description["type"],
            sub_calls_enabled=settings.max_depth > 0,
            nested_enabled=nested_enabled,
            sub_models=[c.model_name for c in self.tree.sub_clients.values()] or [self.client.model_name],
            tools={n: s.description for n, s in self.tree.tools_for(self.depth).items()},
            instructions="\n\n".join(filter(None, [settings.instructions, self.instructions])) or None,
            final_protocol=settings.final_protocol,
            template=settings.custom_system_prompt,
            values=self.tree.values_for(self.depth)[1],
            code_fences=settings.code_fences,
            caller_tools=prompts.caller_tools_section(self.turn.offer) if self.turn else "",
        )
        first = prompts.context_message(description, self.query)
        note = prompts.session_note(*counts, self.lease.context_alias)
        messages: list[Message] = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"{first}\n\n{note}" if note else first},
        ]
        self.messages = messages
        new_messages = list(messages)
        compactions = 0
        while self.progress.iterations < self.max_iterations:
            self.progress.iterations += 1
            if settings.compaction and self.progress.iterations > 1 and self._needs_compaction(messages):
                compactions += 1
                messages[:] = await self._compact(messages, compactions)
                new_messages = list(messages[2:])
            response = await self._root_call(messages, new_messages)
            reply = response.text
            messages.append({"role": "assistant", "content": reply})
            prose = strip_code_blocks(reply).strip()
            if prose:
                self.progress.last_prose = clean_answer(prose, self._is_quoted)
            self.progress.turn_error = None
            if self.turn is not None:
                self.turn.begin([m["content"] for m in messages])
            sub_cut_before = self.tree.budget.usage.sub.truncated_replies
            feedback, final = await cells.run_blocks(reply, self.progress.iterations, truncated=response.truncated)
            sub_cut = self.tree.budget.usage.sub.truncated_replies - sub_cut_before
            if sub_cut:
                feedback.append(prompts.sub_replies_cut(sub_cut, settings.max_reply_tokens))
            if final is None:
                feedback.extend(self._repeats.see(cells.last_turn_code or [reply]))
            if self.turn is not None:
                if not self.turn.made:
                    self.turn.add_text(reply, self._is_quoted)
                settled = await self.turn.settle(final is not None, self.tree.within_deadline)
                if settled.action == "finish":
                    return "tool_calls", final.text if final else "", None
                if settled.action == "fail":
                    return "error", final.text if final else "", settled.message
                if settled.message:
                    feedback.append(settled.message)
                if settled.action == "retry":
                    final = None
            if final is not None:
                problem = await self._validate(final)
                if problem is None:
                    self.progress.final = final
                    return "final", final.text, None
                if self.progress.validation_retries > self.validation_retries:
                    self.progress.final = final  # the last value stays in the result (`final_value`)
                    tries = self.progress.validation_retries
                    return "error", final.text, f"the final answer is invalid after {tries} tries: {problem}"
                feedback.append(f"Your final answer was rejected: {problem}\nFix it and finish again.")
            check_turn_limits(settings, self.progress, self.tree.budget.usage.total.total_tokens, self.depth)
            if self.progress.iterations >= self.max_iterations:
                await self._more_turns()
            if not feedback:
                user = prompts.no_code_nudge(settings.final_protocol)
            else:
                user = prompts.turn_feedback(
                    feedback,
                    cells.variables,
                    self.progress.iterations,
                    self.max_iterations,
                    settings.final_protocol,
                )
            message: Message = {"role": "user", "content": user}
            messages.append(message)
            new_messages = [message]
        return await self._last_chance(messages)

    async def _more_turns(self) -> None:
        """Out of turns at the top level: ask `on_budget` whether the run may take more."""
        asker = self.tree.budget.asker
        if asker is None or self.depth != 0:
            return
        used, limit = self.progress.iterations, self.max_iterations

        def apply(value: float) -> None:
            self.max_iterations = int(value)

        await asker.extend("max_iterations", used, limit, lambda: self.max_iterations, apply)

    def _needs_compaction(self, messages: list[Message]) -> bool:
        settings = self.tree.settings
        used = sum(estimate_tokens(m["content"]) for m in messages)
        return used >= settings.compaction_threshold_pct * settings.context_window

    async def _compact(self, messages: list[Message], count: int) -> list[Message]:
        """Summarise the turns so far (a root call, counted in usage); the REPL state is untouched."""
        ask: Message = {"role": "user", "content": prompts.COMPACTION_REQUEST}
        summary = (await self._root_call([*messages, ask], [ask])).text
        return [
            *messages[:2],
            {"role": "assistant", "content": summary},
            {"role": "user", "content": prompts.compaction_resume(count)},
        ]

    async def _validate(self, final: FinalAnswer) -> str | None:
        """The validator's verdict, worked out on a thread under the run's deadline.

        The value is model code's and the schema may be a caller's: checking them is never done on the event
        loop, which serves other runs and clients meanwhile. When the deadline passes first the run ends
        with ``timeout``, the unchecked answer kept as the partial answer and `final_value`.
        """
        if self.final_validator is None:
            return None
        budget = self.tree.budget
        try:
            problem = await asyncio.wait_for(asyncio.to_thread(self.final_validator, final), budget.remaining_time())
        except TimeoutError:
            self.progress.final = final
            self.progress.last_prose = final.text
            budget.expire_time()
        if problem is not None:
            self.progress.validation_retries += 1
        return problem

    async def _last_chance(self, messages: list[Message]) -> tuple[FinishReason, str, str | None]:
        """Out of turns: ask once for a final answer without code."""
        last: Message = {"role": "user", "content": prompts.last_chance(tools=self.turn is not None)}
        # The extra turn has a number of its own in the log and the console (it is not one of max_iterations).
        reply = (await self._root_call([*messages, last], [last], iteration=self.progress.iterations + 1)).text
        if self.turn is not None:
            self.turn.clear()
            self.turn.begin([*(m["content"] for m in messages), last["content"], reply])
            self.turn.add_text(reply, self._is_quoted)
            if self.turn.made and (await self.turn.settle(False, self.tree.within_deadline)).action == "finish":
                return "tool_calls", "", None
            self.turn.clear()
        return "max_iterations", clean_answer(strip_code_blocks(reply) or reply, self._is_quoted), None
