"""A local server speaking Anthropic's Messages API (``POST /v1/messages``), prompt cache included.

Point the `anthropic` SDK at it with ``base_url=server.url`` (the RLM backend's ``base_url``) and any key.
It checks requests as the API does (``max_tokens``, roles, non-empty text blocks, at most 4
``cache_control`` breakpoints) and bills input the way Anthropic does (`_prompt_cache`): a prefix is read
from the cache at 0.1x only if an earlier request wrote it, writes cost 1.25x, and the response's
``usage`` says so (``cache_read_input_tokens``, ``cache_creation_input_tokens``, ``cache_creation``).
`FakeAnthropicServer.cache.bill` adds it all up. Errors come as Anthropic sends them:
``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from rlm_adapters.testing._prompt_cache import MAX_BREAKPOINTS, TTL_SECONDS, Block, PromptCache
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


def block_tokens(text: str) -> int:
    """Tokens of one text block, about four characters each (as the shared server counts)."""
    return max(1, math.ceil(len(text) / 4))


class RequestError(ValueError):
    """A request the Messages API would refuse with HTTP 400 (the message is its wording)."""


class FakeAnthropicServer(FakeModelServer):
    """Anthropic's Messages API on 127.0.0.1, with the shared scripted root, leaf policy and faults.

    Args:
        min_cache_tokens: The shortest prefix that is cached (Anthropic's minimum for Sonnet and Opus 4).
        **kwargs: As for `FakeModelServer`.
    """

    wire = "anthropic"

    def __init__(self, *args: Any, min_cache_tokens: int = 1024, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cache = PromptCache(min_tokens=min_cache_tokens)

    def set_content(self, payload: Any, content: Any) -> None:
        """A message keeps its blocks in ``content``."""
        payload["content"] = content

    def error(self, status: int, message: str) -> Response:
        """An Anthropic error body (529 is "overloaded"), with a ``request-id`` header."""
        kind = ERROR_TYPES.get(status, "api_error")
        return status, {"type": "error", "error": {"type": kind, "message": message}}, None, {"request-id": "req_fake"}

    async def route(self, method: str, path: str, body: bytes) -> Response:
        """``POST /v1/messages``."""
        path = path.split("?", 1)[0].rstrip("/")
        if method != "POST" or path != "/v1/messages":
            return self.error(404, f"no route {method} {path}")
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise RequestError("the body must be a JSON object")
            model, messages, blocks = parse_request(request)
        except json.JSONDecodeError:
            return self.error(400, "body is not JSON")
        except RequestError as exc:
            return self.error(400, str(exc))
        options = {k: v for k, v in request.items() if k not in ("messages", "system", "model")}
        answer = await self.answer(model, messages, options)
        if not isinstance(answer, Answer):
            return answer
        use = self.cache.account(model, blocks)
        usage = {
            "input_tokens": use.input_tokens,
            "output_tokens": answer.completion_tokens,
            "cache_creation_input_tokens": use.cache_write_tokens,
            "cache_read_input_tokens": use.cache_read_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": use.cache_write_5m_tokens,
                "ephemeral_1h_input_tokens": use.cache_write_1h_tokens,
            },
            "service_tier": "standard",
        }
        payload = {
            "id": f"msg_fake{answer.number:08d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": answer.text}],
            "stop_reason": "max_tokens" if answer.truncated else "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        return 200, payload, None, {"request-id": f"req_fake{answer.number:08d}"}


def parse_request(request: dict[str, Any]) -> tuple[str, list[dict[str, Any]], list[Block]]:
    """The model, the plain messages (system first) and the content blocks of a Messages API request.

    Raises:
        RequestError: The request breaks one of the API's rules.
    """
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("model: Field required")
    if not isinstance(request.get("max_tokens"), int) or isinstance(request.get("max_tokens"), bool):
        raise RequestError("max_tokens: Field required")
    blocks: list[Block] = []
    plain: list[dict[str, Any]] = []
    system = request.get("system")
    if system is not None:
        texts = _texts(system, "system", blocks)
        plain.append({"role": "system", "content": "\n".join(texts)})
    turns = request.get("messages")
    if not isinstance(turns, list) or not turns:
        raise RequestError("messages: at least one message is required")
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
            raise RequestError(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        texts = _texts(turn.get("content"), f"messages.{index}.content", blocks)
        plain.append({"role": turn["role"], "content": "\n".join(texts)})
    marks = sum(b.breakpoint is not None for b in blocks)
    if marks > MAX_BREAKPOINTS:
        raise RequestError(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marks}.")
    return model, plain, blocks


def _texts(content: Any, where: str, blocks: list[Block]) -> list[str]:
    """The texts of a string or a list of text blocks, each appended to `blocks`."""
    if isinstance(content, str):
        if not content:
            raise RequestError(f"{where}: text content blocks must be non-empty")
        blocks.append(Block({"type": "text", "text": content}, block_tokens(content)))
        return [content]
    if not isinstance(content, list) or not content:
        raise RequestError(f"{where}: Input should be a valid string or a non-empty list of content blocks")
    texts = []
    for index, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise RequestError(f"{where}.{index}: only text blocks are supported by this fake")
        if not block["text"]:
            raise RequestError(f"{where}.{index}: text content blocks must be non-empty")
        blocks.append(Block({"type": "text", "text": block["text"]}, block_tokens(block["text"]), _ttl(block, where)))
        texts.append(block["text"])
    return texts


def _ttl(block: dict[str, Any], where: str) -> str | None:
    control = block.get("cache_control")
    if control is None:
        return None
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise RequestError(f"{where}.cache_control.type: Input should be 'ephemeral'")
    ttl = control.get("ttl", "5m")
    if ttl not in TTL_SECONDS:
        raise RequestError(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
    return str(ttl)
