"""A local server speaking Amazon Bedrock Runtime's Converse wire format (``POST /model/{modelId}/converse``).

Point boto3 at it with ``endpoint_url=server.url`` and any credentials: botocore signs the request, and the
server does not check the signature. Errors come as Bedrock sends them: the exception name in the
``x-amzn-ErrorType`` header and ``{"message": ...}`` as the body. ``cachePoint`` blocks are prompt-cache
breakpoints, billed as Anthropic's models on Bedrock bill them (`_prompt_cache`): the usage's
``inputTokens`` leave out ``cacheReadInputTokens`` and ``cacheWriteInputTokens``.
"""

from __future__ import annotations

import json
import math
from typing import Any
from urllib.parse import unquote

from rlm_adapters.testing._prompt_cache import MAX_BREAKPOINTS, Block, CacheUse, PromptCache
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

    def __init__(self, *args: Any, min_cache_tokens: int = 1024, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache = PromptCache(min_tokens=min_cache_tokens)

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
        parsed = converse_request(request)
        if parsed is None:
            return self.error(
                400,
                "A conversation must start with a user message and alternate between user and assistant roles, "
                "with no blank text content block",
            )
        messages, blocks = parsed
        if sum(b.breakpoint is not None for b in blocks) > MAX_BREAKPOINTS:
            return self.error(400, f"The number of cache points exceeds the maximum of {MAX_BREAKPOINTS}")
        model = unquote(parts[1])
        options = {k: v for k, v in request.items() if k not in ("messages", "system")}
        answer = await self.answer(model, messages, options)
        if not isinstance(answer, Answer):
            return answer
        use = self.cache.account(model, blocks)
        return 200, converse_response(answer, use), None, {"x-amzn-RequestId": f"fake-{answer.number}"}


def converse_request(request: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Block]] | None:
    """A Converse request's plain messages (system first) and its text blocks, a ``cachePoint`` marking
    the block before it as a breakpoint; None when malformed."""
    turns = request.get("messages")
    if not isinstance(turns, list):
        return None
    out: list[dict[str, Any]] = []
    blocks: list[Block] = []
    system = _texts(request.get("system") or [], blocks, allow_empty=True)
    if system is None:
        return None
    if system:
        out.append({"role": "system", "content": "\n".join(system)})
    previous = "assistant"  # Bedrock's rules: the first turn is the user's, roles alternate, no blank text
    for turn in turns:
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant") or turn["role"] == previous:
            return None
        texts = _texts(turn.get("content"), blocks)
        if not texts:
            return None
        out.append({"role": turn["role"], "content": "\n".join(texts)})
        previous = turn["role"]
    return out, blocks


def _texts(content: Any, blocks: list[Block], *, allow_empty: bool = False) -> list[str] | None:
    """The texts of a list of Converse content blocks, appended to `blocks`; None when one is malformed."""
    if not isinstance(content, list) or (not content and not allow_empty):
        return None
    texts: list[str] = []
    for item in content:
        if isinstance(item, dict) and "cachePoint" in item:
            if not blocks or not texts or item["cachePoint"] != {"type": "default"}:
                return None  # a cache point follows a block of the same list, and is of the one known type
            blocks[-1] = Block(blocks[-1].key, blocks[-1].tokens, "5m")
            continue
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            return None
        blocks.append(Block({"text": text}, max(1, math.ceil(len(text) / 4))))
        texts.append(text)
    return texts


def converse_response(answer: Answer, use: CacheUse | None = None) -> dict[str, Any]:
    """A Converse response body (with the prompt cache's reads and writes when `use` is given)."""
    usage: dict[str, Any] = {
        "inputTokens": answer.prompt_tokens if use is None else use.input_tokens,
        "outputTokens": answer.completion_tokens,
    }
    if use is not None:
        usage["cacheReadInputTokens"] = use.cache_read_tokens
        usage["cacheWriteInputTokens"] = use.cache_write_tokens
    usage["totalTokens"] = sum(usage.values())
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": answer.text}]}},
        "stopReason": "max_tokens" if answer.truncated else "end_turn",
        "usage": usage,
        "metrics": {"latencyMs": 1},
    }
