"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status OpenAI uses.

Every error body and stream error event is made by `OpenAIError.body`, which masks the credentials of any URL
its message quotes (`core.lm.redact`): a failed run's message may quote the operator's model endpoint.
"""

from __future__ import annotations

from typing import Any, Literal

from rlm_adapters.core.lm import redact

ErrorType = Literal[
    "invalid_request_error", "authentication_error", "permission_error", "not_found_error", "rate_limit_error",
    "server_error",
]  # fmt: skip


class OpenAIError(Exception):
    """A request the server refuses, or a run that failed, as the OpenAI API words it.

    Args:
        status: The HTTP status (400 bad request, 401 no key, 404 unknown model, 429 busy, 500 the run failed).
        message: One line naming the offending value and what to do.
        type: OpenAI's error type.
        param: The request field at fault (dotted for nested ones, ``messages[2].content``), or None.
        code: OpenAI's machine-readable code (``model_not_found``, ``invalid_api_key``, ...), or None.
    """

    def __init__(
        self,
        status: int,
        message: str,
        type: ErrorType = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response (no URL credential in its message)."""
        return {"error": {"message": redact(self.message), "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400 ``invalid_request_error`` about `param`."""
    return OpenAIError(400, message, "invalid_request_error", param, code)
