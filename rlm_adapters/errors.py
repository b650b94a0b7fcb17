"""Exceptions raised by rlm-adapters.

Every error says what was wrong and what to do, in one line, quoting the offending value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rlm_adapters.core.result import RLMResult


class RLMError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigurationError(RLMError, ValueError):
    """A parameter has a value the engine cannot use (also a `ValueError`)."""


class ToolSchemaError(ConfigurationError):
    """One of the caller's tools cannot be offered: its name, or the JSON schema of its parameters.

    Attributes:
        index: Its place in the caller's list of tools (an HTTP front end names ``tools[2]``).
        part: ``"name"`` or ``"parameters"``: what of it is at fault.
    """

    def __init__(self, message: str, index: int, part: Literal["name", "parameters"] = "name") -> None:
        super().__init__(message)
        self.index = index
        self.part = part


class MissingExtraError(RLMError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, feature: str, extra: str, module: str) -> None:
        super().__init__(
            f'{feature} needs the optional dependency {module!r}: install it with pip install "rlm-adapters[{extra}]"'
        )
        self.extra = extra
        self.module = module


class CacheError(ConfigurationError):
    """A call cache file that cannot be used (not ours, corrupt, unreadable); the file is left as it is.

    Attributes:
        path: The file.
        reason: What is wrong with it, without the path (an interface adds its own words: ``--cache``).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"the call cache {path!r} {reason}; it was left as it is: pass cache= another file")
        self.path = path
        self.reason = reason


class StoreError(CacheError):
    """A shared store (``postgresql://...``) that cannot be used: unreachable, refused, missing or too new.

    A `CacheError`, so every interface that names a bad cache names a bad store too.

    Attributes:
        path: The store's URL without its password.
        reason: What is wrong and what to check, without the URL.
    """

    def __init__(self, url: str, reason: str) -> None:
        ConfigurationError.__init__(self, f"the store {url} {reason}")
        self.path = url
        self.reason = reason


class DocumentCacheError(ConfigurationError):
    """The folder of kept conversions cannot be trusted or used; nothing in it is read, nothing is changed.

    A kept conversion is text that reaches a model, so a folder someone else could have written is refused
    as the call cache is.

    Attributes:
        path: The folder (or the entry in it that was refused).
        reason: What is wrong with it, without the path.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"the document cache {path!r} {reason}; it was left as it is: set RLM_DOCUMENT_CACHE to a folder "
            "of your own, or to off"
        )
        self.path = path
        self.reason = reason


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


# How providers say a prompt is over the model's window (OpenAI, vLLM, llama.cpp, Anthropic, Gemini, Bedrock).
_CONTEXT_LIMIT_PHRASES = (
    "context length",
    "context_length",
    "maximum context",
    "context window",
    "context size",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "token limit",
    "reduce the length",
)


def is_context_limit(error: BaseException) -> bool:
    """True when a model error says the prompt did not fit the model's context window (HTTP 413, or the
    provider's words for it)."""
    if isinstance(error, ModelError) and error.status_code == 413:
        return True
    message = str(error).lower()
    return any(phrase in message for phrase in _CONTEXT_LIMIT_PHRASES)


class ContextError(RLMError, ValueError):
    """The context given to a run cannot be used (empty, wrong type, unreadable)."""


class SandboxError(RLMError):
    """The sandbox could not be started or stopped answering."""


class FileLoadError(RLMError, ValueError):
    """Paths could not be loaded (`rlm_adapters.files.load_paths`; also a `ValueError`).

    Raised when a path does not exist, a glob matched nothing, nothing readable was found, a cap
    (``max_bytes``, ``max_files``, ``max_entries``) was exceeded, the time ran out, or the load was cancelled.
    The message names the path as spelled and what to narrow or raise.
    """


class PathNotAllowedError(RLMError, ValueError):
    """A path or glob resolves outside every allowed root (also a `ValueError`).

    The message names the path only as it was spelled (never where a symlink leads, nor what is there)
    and says how to add a root.
    """


class QueryError(RLMError, ValueError):
    """An MCP ``rlm_query`` call's arguments cannot be used (also a `ValueError`).

    Raised by the MCP server for a limit that is not positive or above the server's ceiling, a call with
    neither ``paths`` nor ``text``, an empty ``query``, or a ``session`` the connection cannot keep. The
    message quotes the argument as the client sent it.
    """


class SessionLimitError(RLMError):
    """A persistent session (an MCP ``session``, a ChatRLM thread) cannot be opened: its owner or the whole
    pool has as many open as its limit allows and none of the owner's own is idle to make room.

    The message names the limit as the interface spells it (``--max-client-sessions``, ``max_threads``).
    """


class RLMRunFailed(RLMError):
    """A run ended with no answer because of an error (`RLMResult.failed`): a model call that failed after its
    retries, a sandbox that broke, a typed answer still invalid after ``output_retries``.

    A run that a limit ends (``budget``, ``timeout``, ``max_iterations``, ``cancelled``, ``max_errors``, the
    engine's end of a model repeating itself) is not a failure: it returns its best partial answer.
    ``RLM(raise_on_error=False)`` returns a failed run's result instead of raising; `ChatRLM` and the
    LlamaIndex LLM raise this class for a failed run too.

    Attributes:
        result: The finished run (``result.error`` says why; ``result.final_value`` holds the last value of a
            typed answer that was refused; usage and cost are there as for any run).
    """

    def __init__(self, result: RLMResult) -> None:
        # One line, whatever the provider's error held (a validation report, a traceback): the whole text
        # stays in ``result.error``.
        reason = " ".join((result.error or "no reason was given").split())
        super().__init__(f"the RLM run failed: {reason}")
        self.result = result


class BudgetExceededError(RLMError):
    """A run ran out of budget and `raise_on_budget=True` was set.

    Attributes:
        result: The finished run, with the best partial answer in `result.response`.
    """

    def __init__(self, message: str, result: RLMResult, *, spent: float = 0.0, budget: float | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.partial_answer = result.response
        # The reference RLM's attributes of its own BudgetExceededError.
        self.spent = spent
        self.budget = budget


# The reference RLM's (``rlms``) exceptions, with its attributes. They are raised only with
# ``raise_on_budget=True`` (our default returns a result with a `finish_reason`); each also carries
# `result` and `partial_answer` like every `BudgetExceededError`.
class TimeoutExceededError(BudgetExceededError):
    """The run passed `run_timeout` (`max_timeout`). Attributes: `elapsed`, `timeout`, `partial_answer`."""

    def __init__(self, message: str, result: RLMResult, *, elapsed: float, timeout: float | None) -> None:
        super().__init__(message, result)
        self.elapsed = elapsed
        self.timeout = timeout


class TokenLimitExceededError(BudgetExceededError):
    """A token limit was passed. Attributes: `tokens_used`, `token_limit`, `partial_answer`."""

    def __init__(self, message: str, result: RLMResult, *, tokens_used: int, token_limit: int | None) -> None:
        super().__init__(message, result)
        self.tokens_used = tokens_used
        self.token_limit = token_limit


class ErrorThresholdExceededError(BudgetExceededError):
    """`max_errors` turns in a row had a cell error. Attributes: `error_count`, `threshold`, `last_error`."""

    def __init__(self, message: str, result: RLMResult, *, error_count: int, threshold: int | None) -> None:
        super().__init__(message, result)
        self.error_count = error_count
        self.threshold = threshold
        self.last_error = result.error


class CancellationError(BudgetExceededError):
    """The run was cancelled. Attributes: `partial_answer`, `result`."""


def raise_reference_error(
    result: RLMResult, timeout: float | None, max_cost: float | None, token_limits: dict[str, int | None]
) -> None:
    """Raise the reference RLM's exception for a run a limit ended (``raise_on_budget=True``); else return.

    Args:
        result: The finished run; ``result.metadata["limit"]`` names the limit that ended it.
        timeout: The wall-clock limit.
        max_cost: The money limit.
        token_limits: Token limits by the name the loop reports (``root_tokens``, ``sub_tokens``, ``max_tokens``).
    """
    reason, limit = result.finish_reason, result.metadata.get("limit")
    message = f"the run stopped early ({reason}): {result.error}"
    if reason == "timeout":
        raise TimeoutExceededError(message, result, elapsed=result.execution_time, timeout=timeout)
    if reason == "cancelled":
        raise CancellationError(message, result)
    if reason == "error" and limit == "max_errors":
        threshold = token_limits.get("max_errors")
        raise ErrorThresholdExceededError(message, result, error_count=threshold or 0, threshold=threshold)
    if reason != "budget":
        return
    if limit in token_limits:
        tokens = result.usage_summary.total.total_tokens
        raise TokenLimitExceededError(message, result, tokens_used=tokens, token_limit=token_limits[limit])
    raise BudgetExceededError(message, result, spent=result.cost, budget=max_cost)
