"""A real, local OpenAI-compatible HTTP server for tests, examples and benchmarks.

It speaks enough of the Chat Completions API for the `openai` SDK (and every client built on it, Azure
OpenAI's deployment routes included) to talk to it over a real socket on 127.0.0.1, with scripted root
replies, a leaf policy, latency, injected faults and counters (see `rlm_adapters.testing._server`).

Start it with ``with FakeOpenAIServer(...) as server:`` and point clients at ``server.base_url``.
Run it stand-alone with ``python -m rlm_adapters.testing.fake_openai --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rlm_adapters.testing._faults import HUGE_MARK, Fault, ServerCounters
from rlm_adapters.testing._policies import ROOT_MARKER, LeafPolicy, RootPolicy, default_leaf, scripted_root, turn_of
from rlm_adapters.testing._server import Answer, FakeModelServer, Response

# Characters per streamed piece: about one token each, as servers stream them.
STREAM_PIECE = 4


class FakeOpenAIServer(FakeModelServer):
    """An OpenAI-compatible server on 127.0.0.1 in a background thread.

    Also answers Azure OpenAI's ``/openai/deployments/{name}/chat/completions`` route (the deployment
    name is the model). A request with ``stream`` is answered as an event stream, `stream_piece` characters
    a delta (about one token, as servers stream; None: the whole text in one delta).
    """

    wire = "openai"
    stream_piece: int | None = STREAM_PIECE

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client (``.../v1``)."""
        return f"{self.url}/v1"

    def set_content(self, payload: Any, content: Any) -> None:
        """A chat completion keeps its text in ``choices[0].message.content``."""
        payload["choices"][0]["message"]["content"] = content

    def error(self, status: int, message: str) -> Response:
        """An OpenAI-style error body."""
        error_type = "rate_limit_error" if status == 429 else "server_error"
        return status, {"error": {"message": message, "type": error_type}}, None, {}

    async def route(self, method: str, path: str, body: bytes) -> Response:
        """``GET .../models`` and ``POST .../chat/completions``."""
        path = path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path.endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "rlm"}]}, None, {}
        if method != "POST" or not path.endswith("/chat/completions"):
            return 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}, None, {}
        try:
            request = json.loads(body)
        except json.JSONDecodeError:
            return 400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}, None, {}
        if "model" not in request and _deployment(path):
            request = {**request, "model": _deployment(path)}
        status, payload, raw, headers = await self._complete(request)
        if not request.get("stream") or status != 200 or raw is not None:
            return status, payload, raw, headers
        # Streamed as the completion a subclass's `_complete` made (its usage details included).
        usage = bool((request.get("stream_options") or {}).get("include_usage"))
        stream = event_stream(payload, usage=usage, piece=self.stream_piece)
        return status, payload, stream, {**headers, "content-type": "text/event-stream"}

    async def _complete(self, request: dict[str, Any]) -> Response:
        """Answer one chat completion request (a seam subclasses use to rewrite requests, e.g. benchmarks)."""
        options = {k: v for k, v in request.items() if k not in ("model", "messages")}
        answer = await self.answer(str(request.get("model") or "fake"), request.get("messages") or [], options)
        if not isinstance(answer, Answer):
            return answer
        return 200, _completion(answer), None, {}

    def reshaped_stream(self, shaped: Any) -> bytes:
        """A reshaped completion streamed as a server would: its message as one delta."""
        return event_stream(shaped, usage=True, pieces=False)


def _deployment(path: str) -> str | None:
    """The deployment name of an Azure route (``/openai/deployments/{name}/chat/completions``)."""
    parts = path.split("/")
    return parts[parts.index("deployments") + 1] if "deployments" in parts else None


def event_stream(completion: Any, *, usage: bool, pieces: bool = True, piece: int | None = STREAM_PIECE) -> bytes:
    """A chat completion as its server-sent event stream: the text in pieces of `piece` characters (about a
    token each; None: the whole text in one delta), or, with `pieces` off, the message as one delta (how a
    reshaped reply is sent); the finish reason, the usage when asked for (``stream_options.include_usage``),
    then ``[DONE]``."""
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        return b"data: " + json.dumps(completion).encode() + b"\n\ndata: [DONE]\n\n"
    base = {k: completion.get(k) for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0] if completion["choices"] else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    deltas: list[Any]
    if pieces and piece is not None and isinstance(content, str) and content != HUGE_MARK:
        deltas = [{"content": content[i : i + piece]} for i in range(0, len(content), piece)]
    else:
        deltas = [message if isinstance(message, dict) else {"content": content}]
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if usage:
        chunks.append({**base, "choices": [], "usage": completion.get("usage")})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def _completion(answer: Answer) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fake-{answer.number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.text},
                "finish_reason": "length" if answer.truncated else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        },
    }


DEFAULT_PORT = 8000  # where the README points OPENAI_BASE_URL for a local model server
# The stand-alone server's root model: it must finish over any folder a newcomer points it at, this
# repository included, so its answer is a FINAL call run in the REPL (never a text line an input can hold).
SMOKE_ROOT = ["```repl\nprint(len(context))\n```", '```repl\nFINAL("done")\n```']
CLI_DESCRIPTION = """A local OpenAI-compatible server (Chat Completions over HTTP on 127.0.0.1), for trying rlm
ask, the examples and your own code without a model or a key: OPENAI_BASE_URL=http://127.0.0.1:PORT/v1.

What it answers by default: a request whose system prompt is the RLM's root prompt gets, on its first turn,
a code block that prints len(context), and then a code block calling FINAL("done"), which ends the run over
any input (a bare FINAL(done) line would be taken as a quote of an input that holds it); every other request
(an llm_query sub-call) gets the number that follows "magic number" in its prompt, or NONE. Any model name and
any API key are accepted. Scripted replies, faults and latency per turn are set from Python:
FakeOpenAIServer(root=...)."""


def main(argv: list[str] | None = None) -> int:
    """Serve until interrupted: ``python -m rlm_adapters.testing.fake_openai --port 8000``."""
    parser = argparse.ArgumentParser(
        prog="python -m rlm_adapters.testing.fake_openai",
        description=CLI_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port on 127.0.0.1, 0 for a free one (default: {DEFAULT_PORT})",
    )
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every request waits (default: 0)")
    args = parser.parse_args(argv)
    try:
        server = FakeOpenAIServer(root=SMOKE_ROOT, latency=args.latency, port=args.port).start()
    except RuntimeError as exc:
        parser.exit(2, f"{parser.prog}: {exc} (pick another --port, or 0 for a free one)\n")
    print(f"serving on {server.base_url}", flush=True)
    print(f"set OPENAI_BASE_URL={server.base_url} (any model name and key); Ctrl-C stops", file=sys.stderr)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
    return 0


__all__ = [
    "ROOT_MARKER",
    "SMOKE_ROOT",
    "FakeOpenAIServer",
    "Fault",
    "LeafPolicy",
    "RootPolicy",
    "ServerCounters",
    "default_leaf",
    "scripted_root",
    "turn_of",
]

if __name__ == "__main__":
    raise SystemExit(main())
