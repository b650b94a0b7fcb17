"""A local server speaking Amazon Bedrock Runtime's Converse wire format (``POST /model/{modelId}/converse``).

Point boto3 at it with ``endpoint_url=server.url`` and any credentials: botocore signs the request, and the
server does not check the signature. Errors come as Bedrock sends them: the exception name in the
``x-amzn-ErrorType`` header and ``{"message": ...}`` as the body.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from rlm_adapters.testing._server import Answer, FakeModelServer, Response

ERROR_TYPES = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


class FakeBedrockServer(FakeModelServer):
    """Bedrock Runtime's Converse API on 127.0.0.1, with the shared scripted root, leaf policy and faults."""

    wire = "bedrock"

    def set_content(self, payload: Any, content: Any) -> None:
        """A Converse response keeps its blocks in ``output.message.content``."""
        payload["output"]["message"]["content"] = content

    def error(self, status: int, message: str) -> Response:
        """A Bedrock error: its type in ``x-amzn-ErrorType``, the message in the body."""
        kind = ERROR_TYPES.get(status, "InternalServerException")
        headers = {"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
        return status, {"message": message}, None, headers

    async def route(self, method: str, path: str, body: bytes) -> Response:
        """``POST /model/{modelId}/converse``."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if method != "POST" or len(parts) != 3 or parts[0] != "model" or parts[2] != "converse":
            return self.error(404, f"no route {method} {path}")
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            return self.error(400, "body is not JSON")
        messages = converse_messages(request)
        if messages is None:
            return self.error(
                400,
                "A conversation must start with a user message and alternate between user and assistant roles, "
                "with no blank text content block",
            )
        options = {k: v for k, v in request.items() if k not in ("messages", "system")}
        answer = await self.answer(unquote(parts[1]), messages, options)
        if not isinstance(answer, Answer):
            return answer
        return 200, converse_response(answer), None, {"x-amzn-RequestId": f"fake-{answer.number}"}


def converse_messages(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A Converse request's system blocks and turns as plain messages; None when malformed."""
    turns = request.get("messages")
    if not isinstance(turns, list):
        return None
    out: list[dict[str, Any]] = []
    system = "\n".join(str(block.get("text", "")) for block in request.get("system") or [] if isinstance(block, dict))
    if system:
        out.append({"role": "system", "content": system})
    previous = "assistant"  # Bedrock's rules: the first turn is the user's, roles alternate, no blank text
    for turn in turns:
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant") or turn["role"] == previous:
            return None
        blocks = turn.get("content")
        if not isinstance(blocks, list) or not blocks:
            return None
        texts = [str(b.get("text", "")) if isinstance(b, dict) else "" for b in blocks]
        if any(not text.strip() for text in texts):
            return None
        out.append({"role": turn["role"], "content": "\n".join(texts)})
        previous = turn["role"]
    return out


def converse_response(answer: Answer) -> dict[str, Any]:
    """A Converse response body."""
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": answer.text}]}},
        "stopReason": "end_turn",
        "usage": {
            "inputTokens": answer.prompt_tokens,
            "outputTokens": answer.completion_tokens,
            "totalTokens": answer.prompt_tokens + answer.completion_tokens,
        },
        "metrics": {"latencyMs": 1},
    }
