"""`on_budget`: a limit about to stop the run asks first, and may be raised instead.

``RLM(on_budget=fn)`` (or ``acompletion(..., on_budget=fn)`` for one run): when a raisable limit is reached,
the engine awaits ``fn(limit_name, used, limit)`` and goes on with the number it returns as the new limit,
from where it was (the call that hit the limit waits for the answer, nothing is re-run); ``None`` ends the
run as without a hook. ``fn`` may be a coroutine function or a plain one (run in a thread of its own, so that a
prompt blocking for an answer stalls no call in flight, nor the run's end once its timeout has passed).

Raisable: ``max_root_tokens``, ``max_sub_tokens``, ``max_cost``, ``max_sub_calls`` (the budget the whole
tree shares) and ``max_iterations`` (the top-level run's turns; nested runs end theirs as usual). Not
raisable: ``timeout`` (a promise of when the run returns, enforced by interrupting what is running, so no
answer could keep it), and the reference's after-turn stops ``max_tokens`` and ``max_errors``.

Calls that reach a limit together ask once: questions go one at a time, and a call whose limit was raised
while it waited goes on without asking. An answer that is not a number above the limit (or a hook that
raises) ends the run as ``None`` does, and is logged.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import math
import reprlib
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rlm_adapters.errors import ConfigurationError

logger = logging.getLogger("rlm_adapters.budget")

OnBudget = Callable[[str, float, float], Awaitable[float | int | None] | float | int | None]
RAISABLE = ("max_root_tokens", "max_sub_tokens", "max_cost", "max_sub_calls", "max_iterations")
WHOLE = frozenset({"max_root_tokens", "max_sub_tokens", "max_sub_calls", "max_iterations"})


@dataclass(frozen=True)
class Raised:
    """A limit `on_budget` raised during a run (listed in ``result.metadata["limits_raised"]``)."""

    limit: str
    used: float
    old: float
    new: float

    def to_dict(self) -> dict[str, Any]:
        """``{"limit", "used", "from", "to"}``."""
        return {"limit": self.limit, "used": self.used, "from": self.old, "to": self.new}


def check_hook(on_budget: Any) -> OnBudget | None:
    """`on_budget` when it is None or callable; a `ConfigurationError` otherwise."""
    if on_budget is not None and not callable(on_budget):
        raise ConfigurationError(
            f"on_budget={on_budget!r} must be a function (limit_name, used, limit) -> new limit or None"
        )
    return on_budget  # type: ignore[no-any-return]


class LimitAsker:
    """Asks `on_budget` whether a reached limit may grow, one question at a time, for one run.

    Args:
        hook: The user's function.
        remaining: Seconds left before the run's timeout (None: no timeout): a question unanswered by then
            is a refusal, so that a hook waiting for someone who is not there never outlasts the run.
    """

    def __init__(self, hook: OnBudget, remaining: Callable[[], float | None] = lambda: None) -> None:
        self._hook = hook
        self._remaining = remaining
        self._lock: asyncio.Lock | None = None  # made on the run's loop, at the first question
        self._declined: set[str] = set()  # asked once and refused: the calls that waited meanwhile fail too
        self.raised: list[Raised] = []

    async def extend(
        self, name: str, used: float, limit: float, current: Callable[[], float | None], apply: Callable[[float], None]
    ) -> bool:
        """Whether the limit `name` is now above `limit`: raised by this question, or by one asked meanwhile.

        Args:
            name: The limit, by its parameter name (``max_cost``, ...).
            used: How much of it is used.
            limit: The limit the caller reached.
            current: Reads the limit in force now.
            apply: Sets a new limit.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            now = current()
            if now is None or now > limit:
                return True
            if name in self._declined:
                return False
            answer = await self._ask(name, used, limit)
            new = _accepted(name, answer, limit)
            if new is None:
                self._declined.add(name)
                return False
            apply(new)
            self.raised.append(Raised(name, used, limit, new))
            return True

    async def _ask(self, name: str, used: float, limit: float) -> Any:
        try:
            return await asyncio.wait_for(self._call(name, used, limit), self._remaining())
        except TimeoutError:
            logger.warning("on_budget gave no answer for %s before the run's timeout, so the run ends", name)
            return None
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the run itself is being cancelled
            return self._failed(name, used, limit, exc)  # the hook's own: not a reason to drop the run's calls
        except Exception as exc:
            return self._failed(name, used, limit, exc)

    @staticmethod
    def _failed(name: str, used: float, limit: float, exc: BaseException) -> None:
        """A failing hook declines: the run ends as it would have without one."""
        logger.warning("on_budget failed for %s (used %g of %g), so the run ends: %r", name, used, limit, exc)

    def _call(self, name: str, used: float, limit: float) -> Awaitable[Any]:
        return _call_hook(self._hook, name, used, limit)


async def _call_hook(hook: OnBudget, name: str, used: float, limit: float) -> Any:
    if inspect.iscoroutinefunction(hook):
        return await hook(name, used, limit)
    answer = await _in_own_thread(hook, name, used, limit)
    return await answer if inspect.isawaitable(answer) else answer


def _in_own_thread(hook: OnBudget, *args: Any) -> asyncio.Future[Any]:
    """Run a plain hook on a daemon thread of its own, not the loop's executor.

    A hook blocked on someone who never answers (``input()``) outlives the question's timeout; in the
    executor it would also hold ``asyncio.run`` at its end, and so the caller of ``completion()``, until it
    returned. Its own thread is left behind instead, and its late answer is dropped.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(answer: Any, error: BaseException | None) -> None:
        if future.done():
            if inspect.iscoroutine(answer):
                answer.close()  # the question was given up: its awaitable answer is never awaited
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)

    def run() -> None:
        answer: Any = None
        error: BaseException | None = None
        try:
            answer = context.run(hook, *args)
        except BaseException as exc:  # handed to the question, which declines on it
            error = exc if isinstance(exc, Exception) else RuntimeError(f"on_budget raised {exc!r}")
        try:
            loop.call_soon_threadsafe(settle, answer, error)
        except RuntimeError:  # the run's loop is closed: the run ended without this answer
            if inspect.iscoroutine(answer):
                answer.close()

    threading.Thread(target=run, name="rlm-on-budget", daemon=True).start()
    return future


def _accepted(name: str, answer: Any, limit: float) -> float | None:
    """The new limit in `answer`, or None (declined, or not a number above `limit`, which is logged)."""
    if answer is None:
        return None
    number = answer if isinstance(answer, int | float) and not isinstance(answer, bool) else None
    try:
        number = None if number is None else float(number)  # an int too large for a float is no limit
    except OverflowError:
        number = None
    if number is not None and math.isfinite(number) and name in WHOLE:
        number = math.floor(number)
    if number is None or not math.isfinite(number) or number <= limit:
        logger.warning(
            "on_budget returned %s for %s: not a number above the limit %g, so the run ends",
            reprlib.repr(answer),
            name,
            limit,
        )
        return None
    return float(number) if name not in WHOLE else int(number)
