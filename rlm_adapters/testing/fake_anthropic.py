"""A local server speaking Anthropic's Messages API wire format (``POST /v1/messages``).

Point the ``anthropic`` SDK at it with ``base_url=server.url`` and any API key (the key is not checked).
Errors come as Anthropic sends them: ``{"type": "error", "error": {"type", "message"}}`` and a
``request-id`` header; 529 is Anthropic's "overloaded".
"""

from __future__ import annotations

import json
from typing import Any

from rlm_adapters.testing._server import Answer, FakeModelServer, Response

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class FakeAnthropicServer(FakeModelServer):
    """Anthropic's Messages API on 127.0.0.1, with the shared scripted root, leaf policy and faults."""

    wire = "anthropic"

    def set_content(self, payload: Any, content: Any) -> None:
        """A message keeps its blocks in ``content``."""
        payload["content"] = content

    def error(self, status: int, message: str) -> Response:
        """An Anthropic error body."""
        kind = ERROR_TYPES.get(status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return status, body, None, {"request-id": "req_fake"}

    async def route(self, method: str, path: str, body: bytes) -> Response:
        """``POST /v1/messages``."""
        path = path.split("?", 1)[0].rstrip("/")
        if method != "POST" or path != "/v1/messages":
            return self.error(404, f"no route {method} {path}")
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            return self.error(400, "body is not JSON")
        messages = anthropic_messages(request)
        if messages is None:
            return self.error(400, "messages: roles must alternate, starting with user; max_tokens is required")
        options = {k: v for k, v in request.items() if k not in ("messages", "system", "model")}
        answer = await self.answer(str(request.get("model") or "claude"), messages, options)
        if not isinstance(answer, Answer):
            return answer
        return 200, message_response(answer), None, {"request-id": f"req_fake_{answer.number}"}


def _blocks_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def anthropic_messages(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A Messages request's system prompt and turns as plain messages; None when malformed."""
    turns = request.get("messages")
    if not isinstance(turns, list) or not isinstance(request.get("max_tokens"), int):
        return None
    out: list[dict[str, Any]] = []
    system = _blocks_text(request.get("system"))
    if system:
        out.append({"role": "system", "content": system})
    previous = "assistant"
    for turn in turns:
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant") or turn["role"] == previous:
            return None
        out.append({"role": turn["role"], "content": _blocks_text(turn.get("content"))})
        previous = turn["role"]
    return out


def message_response(answer: Answer) -> dict[str, Any]:
    """A Messages API response body."""
    return {
        "id": f"msg_fake_{answer.number}",
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": [{"type": "text", "text": answer.text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": answer.prompt_tokens, "output_tokens": answer.completion_tokens},
    }
