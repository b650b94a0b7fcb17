"""One request under the per-request timeout, classified failures, and client-side retries when asked for.

Every provider client (OpenAI and the OpenAI-compatible ones, Azure, Anthropic, Bedrock, Gemini, LiteLLM)
switches its SDK's retries off and calls through `call_with_retries`. By default it makes one attempt and
raises a `ModelError` that carries what the engine needs to retry (`core/lm/limiter.py`): the HTTP status,
the server's ``Retry-After``, and whether the failure is retryable (408 / 5xx, a timeout, a dropped
connection; 429 and 503 are overloads, which the engine retries and answers by sending fewer calls at once).
Given ``max_retries``, the client retries as asked (the server's ``Retry-After``, else exponential backoff
with jitter) and the engine then retries only overloads. Either way a final failure is one `ModelError`
with the provider's own message, the endpoint's credentials masked in it (`redaction.py`): a provider's error
often quotes the URL or the request it was sent, and the message reaches clients and the root model.

``timeout`` bounds a whole attempt, from connecting to the last byte of the reply (an SDK's own timeout is
per read: a server trickling a byte at a time would never trip it). No wait between attempts ends past the
run's deadline (`core/lm/deadline.py`): such a retry fails the call at once. A reply over the client's
``max_reply_bytes`` (`core/lm/_http.py`) fails the attempt, not retried.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rlm_adapters.core.lm._http import too_large_in
from rlm_adapters.core.lm.deadline import check_wait
from rlm_adapters.core.lm.redaction import endpoint_secrets, redact
from rlm_adapters.core.lm.reply_identity import public_endpoint
from rlm_adapters.errors import ConfigurationError, ModelError

T = TypeVar("T")

# Seconds one model request may take (``timeout`` in a backend's settings, as the SDKs call it). Not the run's
# wall clock, which is `RLM`'s ``run_timeout`` (`Limits.timeout`) and bounds a whole run tree.
DEFAULT_REQUEST_TIMEOUT = 600.0
# A server asking for a longer pause than this is treated as "not now": the call fails instead of stalling a run.
MAX_RETRY_AFTER = 60.0
_sleep = asyncio.sleep  # module-level so that tests can observe the waits without waiting


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry one model call.

    Attributes:
        max_retries: Further attempts the client makes after the first one.
        request_timeout: Seconds one attempt may take (the backend's ``timeout`` setting).
        engine_retries: The engine retries retryable failures (True unless ``max_retries`` was given).
        initial_delay: First backoff (seconds) when the server gave no ``Retry-After``.
        max_delay: Ceiling of one backoff.
    """

    max_retries: int = 0
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    engine_retries: bool = True
    initial_delay: float = 0.5
    max_delay: float = 20.0

    @classmethod
    def from_kwargs(cls, backend: str, kwargs: dict[str, Any]) -> RetryPolicy:
        """Pop ``timeout`` and ``max_retries`` from `kwargs` and check them."""
        timeout = kwargs.pop("timeout", DEFAULT_REQUEST_TIMEOUT)
        engine_retries = "max_retries" not in kwargs
        max_retries = kwargs.pop("max_retries", 0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigurationError(f"backend {backend!r}: timeout={timeout!r} must be a positive number of seconds")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigurationError(f"backend {backend!r}: max_retries={max_retries!r} must be an integer >= 0")
        return cls(max_retries=max_retries, request_timeout=float(timeout), engine_retries=engine_retries)

    def backoff(self, attempt: int) -> float:
        """The pause before retry number `attempt` (1-based) when the server named none."""
        return float(min(self.max_delay, self.initial_delay * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0))


@dataclass(frozen=True)
class Failure:
    """A provider error, classified.

    Attributes:
        message: The provider's own message.
        status: The HTTP status, when there was a response.
        retryable: Whether another attempt may succeed.
        retry_after: Seconds the server asked to wait, when it said.
        rate_limited: The provider said it is overloaded without a 429 / 503 (an exhausted rate-limit header).
    """

    message: str
    status: int | None = None
    retryable: bool = False
    retry_after: float | None = None
    rate_limited: bool = False


def is_retryable_status(status: int | None) -> bool:
    """429 (rate limited), 408 (request timeout) and every 5xx."""
    return status is not None and (status in (408, 429) or 500 <= status < 600)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date); None when absent."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in lowered:
        try:
            millis = float(lowered["retry-after-ms"])
            if not math.isnan(millis):
                return max(0.0, millis / 1000)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = None
    if seconds is not None:
        return max(0.0, seconds) if not math.isnan(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    classify: Callable[[Exception], Failure | None],
    provider: str,
    model: str,
    where: str | None = None,
    secrets: Iterable[str] = (),
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> T:
    """Run `attempt` with the policy's timeout and retries, never waiting past the run's deadline.

    Args:
        attempt: Makes one request.
        policy: Retries and timeout.
        classify: Turns a provider exception into a `Failure`; None for one it does not know, which fails
            the call too (not retried), named by its type.
        provider: For messages (``"Bedrock"``).
        model: For messages and `ModelError.model`.
        where: The endpoint as configured: messages name it without its credentials (``" at https://..."``),
            and its credentials are masked wherever the provider's error quotes them (`redaction.redact`).
        secrets: Other exact values to mask in the error (the API key).
        sleep: The pause (default `asyncio.sleep`; injectable for tests).

    Raises:
        ModelError: The last failure, once retries are used up or the failure is not retryable;
            `DeadlineExceeded` when the wait before the next try would end past the run's deadline.
    """
    masked = (*endpoint_secrets(where), *secrets)
    shown = public_endpoint(where)
    tries = 0
    while True:
        tries += 1
        cause: Exception | None = None
        try:
            async with asyncio.timeout(policy.request_timeout):
                return await attempt()
        except TimeoutError:
            failure = Failure(
                f"no complete reply within the per-request timeout of {policy.request_timeout:g} s", retryable=True
            )
        except Exception as exc:
            cause = exc
            too_large = too_large_in(exc)
            classified = Failure(str(too_large)) if too_large is not None else classify(exc)
            # Whatever else a reply makes the SDK raise (a RecursionError from nested JSON, a TypeError from a
            # shape it did not expect) is that call's failure, not the engine's.
            failure = classified or Failure(f"{type(exc).__name__}: {str(exc)[:200]}")
        wait = failure.retry_after if failure.retry_after is not None else policy.backoff(tries)
        error = ModelError(
            redact(describe_failure(failure, provider, model, tries, shown), masked),
            model=model,
            status_code=failure.status,
            retry_after=failure.retry_after,
            retryable=policy.engine_retries and failure.retryable,
            rate_limited=failure.rate_limited,
        )
        give_up = not failure.retryable or tries > policy.max_retries
        if not give_up:
            check_wait(wait, error, asked=failure.retry_after is not None)
        if give_up or wait > MAX_RETRY_AFTER:
            raise error from cause
        await (sleep or _sleep)(wait)


# How providers say a request is over the model's window: llama.cpp ("exceeds the available context size"),
# OpenAI and vLLM ("maximum context length", context_length_exceeded), Anthropic ("prompt is too long").
_WINDOW_FULL = re.compile(r"context (?:length|size|window)|maximum context|prompt is too long|too many tokens", re.I)


def describe_failure(failure: Failure, provider: str, model: str, tries: int, where: str | None = None) -> str:
    """One line: which call failed (and where), how, after how many attempts, and what to check."""
    status = f" with HTTP {failure.status}" if failure.status is not None else ""
    hint = {
        400: "check the request settings in backend_kwargs",
        401: "check the API key or credentials",
        403: "check the credentials' permissions and that the model is enabled for them",
        404: "check the model name, region and endpoint (base_url)",
        429: "rate limited; lower max_concurrency or retry later",
    }.get(failure.status or 0, "")
    if failure.status == 400 and _WINDOW_FULL.search(failure.message):
        hint = (
            "the conversation no longer fits the model's context window: lower max_reply_tokens (rlm ask "
            "--max-reply-tokens) so replies leave room, or set compaction=True with context_window set to the "
            "model's window"
        )
    if failure.retry_after is not None and failure.retry_after > MAX_RETRY_AFTER:
        hint = f"the server asked to wait {failure.retry_after:g} s, longer than {MAX_RETRY_AFTER:g} s"
    after = f" after {tries} attempts" if tries > 1 else ""
    tail = f" ({hint})" if hint else ""
    at = f" at {where}" if where else ""
    return f"{provider} call to model {model!r}{at} failed{status}{after}: {failure.message}{tail}"
