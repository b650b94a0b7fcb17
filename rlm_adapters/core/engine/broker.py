"""The host's broker for one run level: answers the REPL's sub-calls and tool calls.

Every call from a sandbox, whatever its kind, lands here: the budget is enforced here (never in the
sandbox), model calls go through `core/engine/model_call.py` (the endpoint's adaptive limit, the cache), and every
call emits start / end events.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.engine.budget import BudgetExhausted
from rlm_adapters.core.engine.model_call import CutCall, call_model, reply_record
from rlm_adapters.core.engine.tool_turn import TurnCalls
from rlm_adapters.core.events import CutReason, SubCallFinished, SubCallKind, SubCallSent, SubCallStarted
from rlm_adapters.core.sandbox import CALL_ERROR_PREFIX, CallError, ValueEncodingError, decode_tool_args, encode_value
from rlm_adapters.errors import ContextError, ModelError

if TYPE_CHECKING:
    from rlm_adapters.core.engine.tree import RunTree

_ids = itertools.count(1)


@dataclass
class _Call:
    """One sub-call or tool call, for its start and end events."""

    call_id: str
    batch_id: str | None
    kind: SubCallKind
    model: str
    started: float = field(default_factory=time.perf_counter)


class Broker:
    """Answers calls from the REPL of one run level.

    Args:
        tree: The shared run state.
        run_id: The run level this broker serves.
        depth: Its depth (0 for the top-level run).
        nested_runner: Starts a nested RLM: ``(prepared context, query, depth, parent_run_id) -> answer``.
        parent_run_id: The run that started this one (None at the top).
    """

    def __init__(
        self, tree: RunTree, run_id: str, depth: int, nested_runner: Any, parent_run_id: str | None = None
    ) -> None:
        self.tree = tree
        self.run_id = run_id
        self.depth = depth
        self.parent_run_id = parent_run_id
        self._nested = nested_runner
        # The top-level run's calls of the caller's tools (`call_tool`), when it was offered tools.
        self.tool_turn: TurnCalls | None = None

    async def handle(self, kind: str, args: dict[str, Any]) -> Any:
        """The `CallHandler` given to the sandbox. Arguments come from model code: each is checked."""
        if kind == "tool":
            name = args.get("name")
            if not isinstance(name, str) or name not in self.tree.tools_for(self.depth):
                # Refused before a byte of its arguments is decoded (they are model code's to forge).
                raise CallError(f"no tool named {str(name)[:80]!r} in this run")
            positional, named = await decode_tool_args(name, args)
            return await self._tool(name, positional, named)
        if kind == "call_tool":
            if self.tool_turn is None:
                where = "a nested RLM cannot call them" if self.depth else "none were offered in this run"
                raise CallError(f"call_tool calls the caller's tools, and {where}: finish with FINAL instead")
            self.tool_turn.add(args.get("name"), args.get("args"))
            return None
        self._check_enabled(kind)
        if kind == "llm_query":
            return await self._llm(_text(args, "prompt"), _model(args), None, 1)
        if kind == "llm_query_batched":
            prompts = self._batch_of(kind, _texts(args, "prompts"))
            model = _model(args)
            batch_id = f"b{next(_ids)}"
            return await self._batch(
                len(prompts), lambda i: self._llm(prompts[i], model, batch_id, len(prompts)), self._width(kind)
            )
        if kind == "rlm_query":
            context, model = self._context_or_model(args.get("context"), _model(args))
            return await self._rlm(_text(args, "prompt"), context, model, None, 1)
        if kind == "rlm_query_batched":
            prompts = self._batch_of(kind, _texts(args, "prompts"))
            contexts = args.get("contexts")
            if contexts is None:
                contexts = [None] * len(prompts)
            if not isinstance(contexts, list) or len(contexts) != len(prompts):
                raise CallError(f"rlm_query_batched: contexts must be a list of {len(prompts)} items (one per prompt)")
            model = _model(args)
            batch_id = f"b{next(_ids)}"
            return await self._batch(
                len(prompts),
                lambda i: self._rlm(prompts[i], contexts[i], model, batch_id, len(prompts)),
                self._width(kind),
            )
        raise CallError(f"unknown call {kind!r}")

    def _context_or_model(self, context: Any, model: Any) -> tuple[Any, str | None]:
        """The reference's ``rlm_query(prompt, model)``: a second positional argument naming one of the
        run's models is the model, not the child's context."""
        if model is None and isinstance(context, str) and context in self.tree.model_names():
            return None, context
        return context, None if model is None else str(model)

    def _check_enabled(self, kind: str) -> None:
        if self.tree.settings.max_depth == 0:
            raise CallError(f"{kind} is disabled in this run (max_depth=0): solve the task with code alone")

    def _batch_of(self, kind: str, prompts: list[str]) -> list[str]:
        """`prompts`, unless there are more than ``max_batch`` (checked before anything is started)."""
        limit = self.tree.settings.max_batch
        if len(prompts) > limit:
            raise CallError(
                f"{kind}: a batch of {len(prompts):,} prompts is more than max_batch={limit:,}; send it in "
                f"batches of at most {limit:,}"
            )
        return prompts

    def _width(self, kind: str) -> int:
        """How many calls of one batch run at once: more could only wait for the endpoint's (or nested) limit."""
        settings = self.tree.settings
        if kind == "rlm_query_batched" and settings.max_concurrent_subcalls is not None:
            return min(settings.max_concurrent_subcalls, settings.max_concurrency)
        return settings.max_concurrency

    async def _batch(self, count: int, call: Callable[[int], Awaitable[str]], width: int) -> list[str]:
        """Run ``call(0)`` ... ``call(count - 1)``, `width` at a time; a failed call gives ``"Error: ..."``.

        Each call is made only once a slot is free, so a batch costs memory and loop time in its width,
        not its length, and a deadline or a cancellation ends it at once. A batch that reaches a budget
        limit is cut there: the calls that got through keep their answers, the rest say which limit
        stopped them (the run then ends after this cell).
        """
        answers = [""] * count
        order = iter(range(count))

        async def lane() -> None:
            for index in order:  # shared: each index is taken by exactly one lane
                try:
                    answers[index] = str(await call(index))
                except BudgetExhausted as exc:
                    answers[index] = f"{CALL_ERROR_PREFIX}budget spent: {exc}"
                except Exception as exc:
                    answers[index] = f"{CALL_ERROR_PREFIX}{exc}"

        await asyncio.gather(*(lane() for _ in range(min(width, count))))
        return answers

    async def _started(self, call: _Call, batch_size: int, prompt: str) -> None:
        await self.tree.bus.emit(
            SubCallStarted(
                run_id=self.run_id,
                depth=self.depth,
                call_id=call.call_id,
                batch_id=call.batch_id,
                batch_size=batch_size,
                call_kind=call.kind,
                model=call.model,
                prompt=prompt,
            )
        )

    async def _sent(self, call: _Call) -> None:
        await self.tree.bus.emit(
            SubCallSent(
                run_id=self.run_id,
                depth=self.depth,
                call_id=call.call_id,
                batch_id=call.batch_id,
                call_kind=call.kind,
                model=call.model,
            )
        )

    async def _finished(
        self,
        call: _Call,
        *,
        response: str = "",
        error: str | None = None,
        model: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: float = 0.0,
        cached: bool = False,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        truncated: bool = False,
        cut: CutReason | None = None,
    ) -> None:
        await self.tree.bus.emit(
            SubCallFinished(
                run_id=self.run_id,
                depth=self.depth,
                call_id=call.call_id,
                batch_id=call.batch_id,
                call_kind=call.kind,
                model=model or call.model,
                response=response,
                error=error,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost=cost,
                duration=time.perf_counter() - call.started,
                cached=cached,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
                truncated=truncated,
                cut=cut,
            )
        )

    async def _llm(self, prompt: str, model: str | None, batch_id: str | None, batch_size: int) -> str:
        client = self.tree.sub_client(model)
        await self.tree.budget.start_sub_call()
        call = _Call(f"c{next(_ids)}", batch_id, "llm_query", client.model_name)
        await self._started(call, batch_size, prompt)
        cut: list[CutCall] = []
        try:
            response, cost = await call_model(
                self.tree,
                client,
                [{"role": "user", "content": prompt}],
                "sub",
                run_id=self.run_id,
                depth=self.depth,
                parent_run_id=self.parent_run_id,
                on_sent=lambda: self._sent(call),
                on_cut=cut.append,
            )
        except (ModelError, BudgetExhausted, asyncio.CancelledError) as exc:
            # The log shows every call's end; a cut one with what it had produced (it is in the usage).
            ended = cut[0] if cut else None
            await self._finished(
                call,
                response=ended.text if ended else "",
                error=str(exc) or f"the call was {ended.reason if ended else 'cancelled'}",
                input_tokens=ended.input_tokens if ended else 0,
                output_tokens=ended.output_tokens if ended else 0,
                cost=ended.cost if ended else 0.0,
                cut=ended.reason if ended else None,
            )
            if isinstance(exc, BudgetExhausted | asyncio.CancelledError):
                raise
            raise CallError(str(exc)) from exc
        await self._finished(call, response=response.text, **reply_record(response, cost))
        return response.text

    async def _rlm(self, prompt: str, context: Any, model: str | None, batch_id: str | None, batch_size: int) -> str:
        if self.depth + 1 >= self.tree.settings.max_depth:
            # At the depth limit a nested RLM becomes a plain sub-call (the root was told so).
            text = prompt if context is None else f"{prompt}\n\n{_as_text(context)}"
            return await self._llm(text, model, batch_id, batch_size)
        if model is not None:
            self.tree.sub_client(model)  # an unknown name fails here, before a child starts
        try:  # a nested context is checked and described like the top one, before any budget is spent
            nested = context if context is not None else prompt
            prepared = validate_context(nested, self.tree.settings.context_preview_chars)
        except ContextError as exc:
            raise CallError(f"rlm_query: {exc}") from None
        # The budget is checked before a nested run's sandbox starts, and again once a slot is free.
        await self.tree.budget.start_sub_call()
        async with self.tree.nested_slots(), self.tree.sandbox_slot(self.depth + 1):
            await self.tree.budget.check_open("sub")
            answer: str = await self._nested(
                prepared,
                prompt if context is not None else None,
                self.depth + 1,
                self.run_id,
                model,
                (batch_id, batch_size),
            )
        return answer

    async def _tool(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        spec = self.tree.tools_for(self.depth).get(name)
        if spec is None:
            raise CallError(f"no tool named {name!r} in this run")
        call = _Call(f"t{next(_ids)}", None, "tool", name)
        await self._started(call, 1, repr((args, kwargs))[:2000])
        try:
            value = await self.tree.within_deadline(spec.call(args, kwargs))
        except BudgetExhausted:
            raise
        except Exception as exc:
            error = f"tool {name!r} failed: {type(exc).__name__}: {exc}"
            await self._finished(call, error=error)
            raise CallError(error) from exc
        try:
            encoded = encode_value(value, f"the return value of {name}()")
        except ValueEncodingError as exc:
            await self._finished(call, error=str(exc))
            raise CallError(str(exc)) from None
        await self._finished(call, response=repr(value)[:2000])
        return encoded


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key, "")
    if not isinstance(value, str):
        raise CallError(f"{key} must be a string, got {type(value).__name__}")
    return value


def _texts(args: dict[str, Any], key: str) -> list[str]:
    values = args.get(key)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise CallError(f"{key} must be a list of strings")
    return values


def _model(args: dict[str, Any]) -> str | None:
    model = args.get("model")
    if model is not None and not isinstance(model, str):
        raise CallError(f"model must be a model name (a string) or None, got {type(model).__name__}")
    return model


def _as_text(context: Any) -> str:
    if isinstance(context, str):
        return context
    import json

    try:
        return json.dumps(context, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(context)
