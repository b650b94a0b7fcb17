"""The OpenAI and Anthropic SDKs' errors as `Failure`s (both SDKs share one generated error hierarchy).

Their own retries are off (``max_retries=0`` on the SDK client); `_retry.call_with_retries` retries instead,
so that its waits see the run's deadline. What the SDK would have retried is retryable here too: 408, 409,
429 and 5xx, timeouts and dropped connections, and whatever the server's ``x-should-retry`` header says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlm_adapters.core.lm._retry import Failure, is_retryable_status, parse_retry_after


def out_of_requests(headers: Mapping[str, str]) -> bool:
    """Whether the rate-limit headers say no request is left in the current window (OpenAI's and Anthropic's)."""
    return any(
        str(headers.get(name, "")).strip() == "0"
        for name in ("x-ratelimit-remaining-requests", "anthropic-ratelimit-requests-remaining")
    )


def sdk_failure(exc: Exception, sdk: Any) -> Failure | None:
    """`exc` raised by the `sdk` module (``openai`` or ``anthropic``) as a `Failure`; None when it is not the SDK's.

    A body that is not JSON surfaces as a `ValueError` from the SDK's parsing: a failure, not retried.
    """
    detail = str(getattr(exc, "message", None) or exc or type(exc).__name__)
    if isinstance(exc, sdk.APIStatusError):
        headers = exc.response.headers
        should = str(headers.get("x-should-retry", "")).lower()
        status = exc.status_code
        retryable = should == "true" or (should != "false" and (is_retryable_status(status) or status == 409))
        return Failure(
            detail,
            status=status,
            retryable=retryable,
            retry_after=parse_retry_after(headers),
            rate_limited=out_of_requests(headers),
        )
    if isinstance(exc, sdk.APITimeoutError):  # a per-read timeout of the SDK
        return Failure(f"{type(exc).__name__}: {detail}", retryable=True)
    if isinstance(exc, sdk.APIConnectionError):
        # The SDK says only "Connection error."; its cause says why (refused, unknown host), and a newcomer
        # needs to hear where to look.
        cause = f" ({exc.__cause__})" if exc.__cause__ is not None and str(exc.__cause__) else ""
        variable = f"{sdk.__name__.upper()}_BASE_URL"
        hint = f"nothing answered: check that the server is running and the host and port of base_url / {variable}"
        return Failure(f"{type(exc).__name__}: {detail}{cause}; {hint}", retryable=True)
    if isinstance(exc, ValueError) or type(exc).__module__.split(".", 1)[0] == sdk.__name__:
        return Failure(f"{type(exc).__name__}: {detail}")
    return None
