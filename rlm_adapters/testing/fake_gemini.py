"""A local server speaking the Gemini API's wire format (``POST /{version}/models/{model}:generateContent``,
and Vertex AI's ``.../projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent``).

Point google-genai at it with ``http_options={"base_url": server.url}`` (the RLM backend's ``base_url``).
Errors come as Google sends them: ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import json
from typing import Any

from rlm_adapters.testing._server import Answer, FakeModelServer, Response

STATUSES = {
    400: "INVALID_ARGUMENT",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


class FakeGeminiServer(FakeModelServer):
    """The Gemini API's ``generateContent`` on 127.0.0.1, with the shared scripted root, leaf policy and faults."""

    wire = "gemini"

    def set_content(self, payload: Any, content: Any) -> None:
        """A generateContent response keeps its parts in ``candidates[0].content.parts``."""
        payload["candidates"][0]["content"]["parts"] = content

    def error(self, status: int, message: str) -> Response:
        """A Google API error body."""
        return (
            status,
            {"error": {"code": status, "message": message, "status": STATUSES.get(status, "UNKNOWN")}},
            None,
            {},
        )

    async def route(self, method: str, path: str, body: bytes) -> Response:
        """``POST /{version}/models/{model}:generateContent``."""
        path = path.split("?", 1)[0]
        head, _, action = path.rpartition(":")
        parts = head.strip("/").split("/")
        # Gemini API: /{version}/models/{model}; Vertex AI:
        # /{version}/projects/{project}/locations/{location}/publishers/google/models/{model}
        gemini_api = len(parts) == 3 and parts[1] == "models"
        vertex = len(parts) == 9 and parts[1::2][:4] == ["projects", "locations", "publishers", "models"]
        if method != "POST" or action != "generateContent" or not (gemini_api or vertex):
            return self.error(404, f"no route {method} {path}")
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            return self.error(400, "body is not JSON")
        messages = gemini_messages(request)
        if messages is None:
            return self.error(400, "contents must be a list of {role, parts: [{text}]}")
        options = {k: v for k, v in request.items() if k not in ("contents", "systemInstruction")}
        answer = await self.answer(parts[-1], messages, options)
        if not isinstance(answer, Answer):
            return answer
        return 200, gemini_response(answer), None, {}


def _parts_text(content: Any) -> str:
    parts = content.get("parts") if isinstance(content, dict) else None
    return "".join(str(p.get("text", "")) for p in parts or [] if isinstance(p, dict))


def gemini_messages(request: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A generateContent request's system instruction and contents as plain messages; None when malformed."""
    contents = request.get("contents")
    if not isinstance(contents, list):
        return None
    out: list[dict[str, Any]] = []
    system = _parts_text(request.get("systemInstruction"))
    if system:
        out.append({"role": "system", "content": system})
    for content in contents:
        if not isinstance(content, dict) or content.get("role") not in ("user", "model"):
            return None
        out.append({"role": "assistant" if content["role"] == "model" else "user", "content": _parts_text(content)})
    return out


def gemini_response(answer: Answer) -> dict[str, Any]:
    """A generateContent response body."""
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": answer.text}]},
                "finishReason": "MAX_TOKENS" if answer.truncated else "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": answer.prompt_tokens,
            "candidatesTokenCount": answer.completion_tokens,
            "totalTokenCount": answer.prompt_tokens + answer.completion_tokens,
        },
        "modelVersion": answer.model,
        "responseId": f"fake-{answer.number}",
    }
