"""What one run level has done so far, and the reference's per-turn limits checked against it."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlm_adapters.core.events import FinishReason
from rlm_adapters.core.sandbox import FinalAnswer
from rlm_adapters.core.settings import RLMSettings


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
