"""Exceptions raised by rlm-adapters.

Every error says what was wrong and what to do, in one line, quoting the offending value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlm_adapters.core.result import RLMResult


class RLMError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigurationError(RLMError, ValueError):
    """A parameter has a value the engine cannot use (also a `ValueError`)."""


class MissingExtraError(RLMError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(
            f'{feature} needs the optional dependency {module!r}: install it with pip install "rlm-adapters[{extra}]"'
        )
        self.extra = extra
        self.module = module


class ModelError(RLMError):
    """A model call failed (after the retries its client or the engine makes).

    Attributes:
        model: The model called.
        status_code: The HTTP status, when the provider answered with one.
        retry_after: Seconds the provider asked to wait before trying again (``Retry-After``).
        retryable: Whether trying the same call again may succeed (timeouts, 5xx, dropped connections).
        rate_limited: Whether the provider said it is overloaded without a 429/503 status (e.g. an
            exhausted ``x-ratelimit-remaining-*`` header), so the engine should send fewer calls at once.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str,
        status_code: int | None = None,
        retry_after: float | None = None,
        retryable: bool = False,
        rate_limited: bool = False,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.status_code = status_code
        self.retry_after = retry_after
        self.retryable = retryable
        self.rate_limited = rate_limited


class ContextError(RLMError, ValueError):
    """The context given to a run cannot be used (empty, wrong type, unreadable)."""


class SandboxError(RLMError):
    """The sandbox could not be started or stopped answering."""


class BudgetExceededError(RLMError):
    """A run ran out of budget and `raise_on_budget=True` was set.

    Attributes:
        result: The finished run, with the best partial answer in `result.response`.
    """

    def __init__(self, message: str, result: RLMResult) -> None:
        super().__init__(message)
        self.result = result
        self.partial_answer = result.response
