"""The run's deadline as the model clients see it: a context variable set around each model call.

The engine knows when a run must end (`RunTree.deadline`); the `LMClient` protocol stays "messages in, reply
out", so the deadline travels beside the call instead of as an argument: `run_call` sets it for the call and
its retries, and everything under the call reads it. The limiter's backoff and `_retry.call_with_retries` make
no wait that would end past it (`DeadlineExceeded` at once, naming the wait and the time left), and the
provider clients hand the time left to their SDK (Gemini's per-request timeout, the Bedrock thread's reads)
so that the SDK's own work stops by then too. A client called outside a run sees no deadline.

The variable is per task (each call of a batch has its own); nothing is kept between calls.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

from rlm_adapters.errors import ModelError

_DEADLINE: ContextVar[float | None] = ContextVar("rlm_call_deadline", default=None)


class DeadlineExceeded(ModelError):
    """A model call ended early: the wait before its next try would end past the run's deadline.

    Never retried (the time is not there); a top-level root call that meets it ends the run with
    ``finish_reason="timeout"``, a sub-call returns it to model code as any failed call.
    """


@contextlib.contextmanager
def call_deadline(deadline: float | None) -> Iterator[None]:
    """Make `deadline` (a `time.monotonic()` instant, None: none) the deadline of the calls made inside."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float | None:
    """The deadline of the call being made (a `time.monotonic()` instant), or None."""
    return _DEADLINE.get()


def time_left(deadline: float | None = None) -> float | None:
    """Seconds until `deadline` (default: the current call's), never negative; None without one."""
    if deadline is None:
        deadline = _DEADLINE.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def bounded(timeout: float) -> float:
    """`timeout`, cut to the time left before the current call's deadline."""
    left = time_left()
    return timeout if left is None else min(timeout, left)


def seconds(value: float) -> str:
    """A duration for a message: ``0.25``, ``7``, ``99,999,999``."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}"


def check_wait(wait: float, error: ModelError, *, asked: bool) -> None:
    """Raise `DeadlineExceeded` when waiting `wait` seconds before retrying `error` would pass the deadline.

    Args:
        wait: The pause before the next try.
        error: The failure that would be retried.
        asked: Whether the server named the pause (``Retry-After``) or it is a backoff of our own.
    """
    left = time_left()
    if left is None or wait < left:
        return
    why = "as the server asked (Retry-After)" if asked else "to back off"
    raise DeadlineExceeded(
        f"{error}; not retried: waiting {seconds(wait)} s {why} would pass the run's deadline, {left:.3g} s away",
        model=error.model,
        status_code=error.status_code,
        retry_after=error.retry_after,
        retryable=False,
        rate_limited=error.rate_limited,
    )
