"""The one path of a model call: the call cache, the endpoint's limit, the budget and the run's deadline.

The root's turns (`core/engine/loop.py`) and the REPL's sub-calls (`core/engine/broker.py`) both call models through
`call_model`, so that no call is sent, replayed or paid any other way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rlm_adapters.core.budget_limits import DEFAULT_OUTPUT_RESERVE
from rlm_adapters.core.engine.budget import BudgetExhausted, BudgetWarning
from rlm_adapters.core.engine.tree import RunTree, endpoint_of
from rlm_adapters.core.events import BudgetEvent, ConcurrencyCut, CutReason
from rlm_adapters.core.lm import (
    CallProgress,
    DeadlineExceeded,
    LMResponse,
    Message,
    ModelClient,
    call_scope,
    checked_response,
    public_endpoint,
    redact,
    run_call,
)
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.core.usage import Role
from rlm_adapters.errors import ModelError


@dataclass(frozen=True)
class CutCall:
    """A call that ended before its reply was whole, as it was counted.

    Attributes:
        reason: Why it ended (a timeout, a spent budget, a cancellation, an error mid-reply).
        text: The reply's text that had arrived (streaming clients), else "".
        input_tokens: Its prompt: the provider's count when it sent one, else the engine's estimate.
        output_tokens: The reply tokens that had arrived (0 for a client that does not stream).
        cost: What those tokens cost by the price table.
    """

    reason: CutReason
    text: str
    input_tokens: int
    output_tokens: int
    cost: float


# Told each piece of a reply as it streams in, with the progress record of the try it belongs to (a retried
# call's second try has a record of its own).
PieceListener = Callable[[CallProgress, str], None]


@dataclass
class HandedOn(CallProgress):
    """A call's progress that also hands each streamed piece to a listener as it arrives."""

    listener: PieceListener | None = None

    def received(self, piece: str) -> None:
        """Count the piece, then hand it on."""
        super().received(piece)
        if piece and self.listener is not None:
            self.listener(self, piece)


def reply_record(response: LMResponse, cost: float) -> dict[str, Any]:
    """What a call's log record says of its reply beside the text (the root's `RootCall`, a sub-call's
    `SubCallFinished`): the model, tokens, cost, cache use and whether the reply was cut at its cap."""
    return {
        "model": response.model,
        "input_tokens": response.input_tokens,
        "output_tokens": response.output_tokens,
        "cost": cost,
        "cached": response.cached,
        "cache_read_tokens": response.cache_read_tokens,
        "cache_write_tokens": response.cache_write_tokens,
        "truncated": response.truncated,
    }


def output_bound(client: ModelClient) -> int | None:
    """The most a reply of `client` may hold, when the client says (its ``max_output_tokens``)."""
    value = client.max_output_tokens
    return value if value is not None and value >= 0 else None


def without_credentials(error: ModelError) -> ModelError:
    """`error` with no credential of a URL in its text (a client of a user's own, a LangChain or LlamaIndex
    model, quotes its library's exception, which may quote the URL); the same error when there was none.

    Its text reaches the REPL (``Error: ...``, which the root model reads and may repeat), ``result.error``,
    the trajectory and every adapter's output, so this is the one place every model error passes.
    """
    text = str(error)
    clean = redact(text)
    if clean == text:
        return error
    return type(error)(  # a DeadlineExceeded stays one
        clean,
        model=error.model,
        status_code=error.status_code,
        retry_after=error.retry_after,
        retryable=error.retryable,
        rate_limited=error.rate_limited,
    )


def cut_reason(exc: BaseException, progress: CallProgress) -> CutReason | None:
    """Why a call that raised `exc` counts as cut (a provider did work for it), or None: it was refused.

    A cancellation, the run's deadline and a spent budget cut a request in flight; an error counts only once
    part of the reply had arrived (a stream that broke), since a refused request is not billed.
    """
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, BudgetExhausted):
        return "timeout" if exc.resource == "time" else "budget"
    if isinstance(exc, TimeoutError | DeadlineExceeded):
        return "timeout"
    if isinstance(exc, ModelError) and progress.output_tokens > 0:
        return "error"
    return None


async def call_model(
    tree: RunTree,
    client: ModelClient,
    messages: list[Message],
    role: Role,
    *,
    run_id: str,
    depth: int,
    parent_run_id: str | None = None,
    on_sent: Callable[[], Awaitable[None]] | None = None,
    on_cut: Callable[[CutCall], None] | None = None,
    on_piece: PieceListener | None = None,
) -> tuple[LMResponse, float]:
    """One model call under the endpoint's adaptive limit, the budget and the run's deadline.

    Each try reserves the budget once it holds its slot in the endpoint's limit (so calls queued behind
    the limit hold nothing) and settles when it returns; a warning it causes is emitted with the
    caller's ids, awaited, before the call returns. With a call cache (`tree.calls`), a stored reply is
    replayed without a request or a slot (``response.cached``), and a live reply is stored before it is used.

    Args:
        tree: The shared run state.
        client: The model to call.
        messages: The conversation to send.
        role: Whose budget it spends.
        run_id: The calling run level (for the events the call causes).
        depth: Its depth.
        parent_run_id: The run that started the calling one.
        on_sent: Awaited once, when the first request really leaves (its slot and budget are held).
        on_cut: Told of a try that was cut after it left (it is in the usage and the budget), before the
            exception that cut it propagates.
        on_piece: Told each piece of the reply as a streaming client receives it (the direct route's
            answer streams so); a reply replayed from the call cache, or from a client that does not stream,
            gives none.

    Returns:
        The response and its cost.
    """
    estimate = sum(estimate_tokens(m["content"]) for m in messages)
    cap = tree.settings.max_reply_tokens
    bound = output_bound(client)
    if bound is None and cap is not None:
        # The run-wide cap is generous (reasoning models need room); holding all of it for every call in
        # flight would serialise wide batches, so the budget holds what an uncapped call held.
        bound = min(cap, DEFAULT_OUTPUT_RESERVE)
    settled: list[tuple[float, list[BudgetWarning]]] = []
    sent: list[bool] = []  # retries resend the same request: it is marked sent once
    ticket = tree.calls.ticket(client, messages) if tree.calls is not None else None  # before any wait
    stored = await ticket.lookup() if ticket is not None else None

    async def attempt() -> LMResponse:
        reservation = await tree.budget.reserve(role, client.model_name, estimate, bound)
        progress = CallProgress() if on_piece is None else HandedOn(listener=on_piece)
        try:
            if on_sent is not None and not sent:
                sent.append(True)
                await on_sent()
            with call_scope(cap, progress):
                reply = await tree.within_deadline(client.acomplete(messages))
            response = checked_response(reply, model=client.model_name, input_estimate=estimate)
        except BaseException as exc:
            reason = cut_reason(exc, progress)
            if reason is None:
                tree.budget.release(reservation)
                raise
            # The provider did this work and bills it: it counts in the usage and the budget.
            used_in = progress.input_tokens if progress.input_tokens is not None else estimate
            cost, _ = tree.budget.settle(reservation, client.model_name, used_in, progress.output_tokens, cut=True)
            if on_cut is not None:
                on_cut(CutCall(reason, progress.text, used_in, progress.output_tokens, cost))
            raise
        settled.append(
            tree.budget.settle(
                reservation,
                response.model,
                response.input_tokens,
                response.output_tokens,
                response.cost,
                cache_read_tokens=response.cache_read_tokens,
                cache_write_tokens=response.cache_write_tokens,
                truncated=response.truncated,
            )
        )
        return response

    limiter = tree.limiter(client)

    async def report_cut(limit: int) -> None:
        await tree.bus.emit(
            ConcurrencyCut(
                run_id=run_id,
                depth=depth,
                endpoint=public_endpoint(endpoint_of(client)) or "",
                limit=limit,
                ceiling=limiter.ceiling,
            )
        )

    if stored is not None:
        reservation = await tree.budget.reserve(role, stored.model, estimate, bound, replay=True)
        if on_sent is not None:  # a replayed reply came from a model this request reached, when it was paid
            await on_sent()
        response = stored.response()
        cost, warnings = tree.budget.replay(reservation, *stored.usage())
    else:
        try:
            response = await run_call(limiter, attempt, report_cut, tree.deadline())
        except ModelError as exc:
            clean = without_credentials(exc)
            if isinstance(exc, DeadlineExceeded) and role == "root":
                # The run cannot go on before its deadline: it ends as a timeout, now.
                tree.budget.expire_time(str(clean))
            if clean is exc:
                raise
            raise clean from exc
        cost, warnings = settled[-1]
        if ticket is not None:
            response = await ticket.keep(response, cost)
    for warning in warnings:
        await tree.bus.emit(
            BudgetEvent(
                run_id=run_id,
                depth=depth,
                parent_run_id=parent_run_id,
                resource=warning.resource,
                used=warning.used,
                limit=warning.limit,
                exhausted=False,
                message=warning.message,
            )
        )
    return response, cost
