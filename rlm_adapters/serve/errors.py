"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status OpenAI uses."""

from __future__ import annotations

from typing import Any, Literal

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
        """The JSON body of the error response."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """A 400 ``invalid_request_error`` about `param`."""
    return OpenAIError(400, message, "invalid_request_error", param, code)
