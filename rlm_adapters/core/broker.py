"""The host's broker for one run level: answers the REPL's sub-calls and tool calls.

Every call from a sandbox, whatever its kind, lands here: the budget is enforced here (never in the
sandbox), concurrency is bounded by the endpoint's adaptive limit, and every call emits start / end events.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.budget import BudgetExhausted, estimate_tokens
from rlm_adapters.core.events import ConcurrencyCut, SubCallFinished, SubCallKind, SubCallStarted
from rlm_adapters.core.lm.base import LMClient, LMResponse, Message
from rlm_adapters.core.lm.limiter import run_call
from rlm_adapters.core.sandbox.base import CallError
from rlm_adapters.core.tree import endpoint_of
from rlm_adapters.core.usage import Role
from rlm_adapters.errors import ModelError

if TYPE_CHECKING:
    from rlm_adapters.core.tree import RunTree

_ids = itertools.count(1)


async def call_model(
    tree: RunTree, client: LMClient, messages: list[Message], role: Role, *, run_id: str, depth: int
) -> tuple[LMResponse, float]:
    """One model call under the budget, the endpoint's adaptive limit and the run's deadline.

    Args:
        tree: The shared run state.
        client: The model to call.
        messages: The conversation to send.
        role: Whose budget it spends.
        run_id: The calling run level (for the events the call causes).
        depth: Its depth.

    Returns:
        The response and its cost.
    """
    estimate = sum(estimate_tokens(m["content"]) for m in messages)
    reserved = tree.budget.reserve(role, estimate)

    async def attempt() -> LMResponse:
        tree.budget.check_time()
        return await tree.within_deadline(client.acomplete(messages))

    limiter = tree.limiter(client)

    async def report_cut(limit: int) -> None:
        await tree.bus.emit(
            ConcurrencyCut(
                run_id=run_id, depth=depth, endpoint=endpoint_of(client), limit=limit, ceiling=limiter.ceiling
            )
        )

    try:
        response = await run_call(limiter, attempt, report_cut)
    except BaseException:
        tree.budget.release(role, reserved)
        raise
    cost = tree.budget.commit(role, response.model, reserved, response.input_tokens, response.output_tokens)
    return response, cost


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
        nested_runner: Starts a nested RLM: ``(context, query, depth, parent_run_id) -> answer``.
    """

    def __init__(self, tree: RunTree, run_id: str, depth: int, nested_runner: Any) -> None:
        self.tree = tree
        self.run_id = run_id
        self.depth = depth
        self._nested = nested_runner

    async def handle(self, kind: str, args: dict[str, Any]) -> Any:
        """The `CallHandler` given to the sandbox."""
        if kind == "tool":
            return await self._tool(str(args.get("name")), list(args.get("args") or []), dict(args.get("kwargs") or {}))
        self._check_enabled(kind)
        if kind == "llm_query":
            return await self._llm(str(args.get("prompt", "")), args.get("model"), None, 1)
        if kind == "llm_query_batched":
            prompts = [str(p) for p in args.get("prompts") or []]
            batch_id = f"b{next(_ids)}"
            return await self._batch([self._llm(p, args.get("model"), batch_id, len(prompts)) for p in prompts])
        if kind == "rlm_query":
            return await self._rlm(str(args.get("prompt", "")), args.get("context"), None, 1)
        if kind == "rlm_query_batched":
            prompts = [str(p) for p in args.get("prompts") or []]
            contexts = args.get("contexts") or [None] * len(prompts)
            batch_id = f"b{next(_ids)}"
            return await self._batch(
                [self._rlm(p, c, batch_id, len(prompts)) for p, c in zip(prompts, contexts, strict=False)]
            )
        raise CallError(f"unknown call {kind!r}")

    def _check_enabled(self, kind: str) -> None:
        if self.tree.settings.max_depth == 0:
            raise CallError(f"{kind} is disabled in this run (max_depth=0): solve the task with code alone")

    async def _batch(self, calls: list[Any]) -> list[str]:
        """Run calls concurrently; a failed call gives an error string in its slot."""
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        answers: list[str] = []
        for outcome in outcomes:
            if isinstance(outcome, BudgetExhausted):
                raise outcome
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            if isinstance(outcome, BaseException):
                answers.append(f"[error: {outcome}]")
            else:
                answers.append(str(outcome))
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
            )
        )

    async def _llm(self, prompt: str, model: str | None, batch_id: str | None, batch_size: int) -> str:
        client = self.tree.sub_client(model)
        call = _Call(f"c{next(_ids)}", batch_id, "llm_query", client.model_name)
        await self._started(call, batch_size, prompt)
        try:
            response, cost = await call_model(
                self.tree, client, [{"role": "user", "content": prompt}], "sub", run_id=self.run_id, depth=self.depth
            )
        except (ModelError, BudgetExhausted) as exc:
            await self._finished(call, error=str(exc))
            if isinstance(exc, BudgetExhausted):
                raise
            raise CallError(str(exc)) from exc
        await self._finished(
            call,
            response=response.text,
            model=response.model,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            cost=cost,
        )
        return response.text

    async def _rlm(self, prompt: str, context: Any, batch_id: str | None, batch_size: int) -> str:
        if self.depth + 1 >= self.tree.settings.max_depth:
            # At the depth limit a nested RLM becomes a plain sub-call (the root was told so).
            text = prompt if context is None else f"{prompt}\n\n{_as_text(context)}"
            return await self._llm(text, None, batch_id, batch_size)
        answer: str = await self._nested(
            context if context is not None else prompt,
            prompt if context is not None else None,
            self.depth + 1,
            self.run_id,
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
        await self._finished(call, response=repr(value)[:2000])
        return value


def _as_text(context: Any) -> str:
    if isinstance(context, str):
        return context
    import json

    try:
        return json.dumps(context, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(context)
