"""A scripted Anthropic Messages API on 127.0.0.1 for driving a real ``claude -p`` session key-free.

It streams what Claude Code asks for (``stream: true`` server-sent events, the Messages API's event
sequence) and keeps every request, so a test can see what Claude Code sent the model. The script: while
the conversation has no tool result yet, call ``Read`` on `read_path` (or, given `call`, that tool with those
arguments); then answer ``done reading``.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "done reading"
MAX_WAITS = 20  # WaitForMcpServers calls while an MCP server is still connecting


_MESSAGE_IDS = itertools.count(1)


def _events(model: str, block: dict[str, Any], stop_reason: str) -> bytes:
    """One assistant message of one content block, as the Messages API streams it.

    Each message has its own id, as the API gives: Claude Code groups a conversation into API rounds by
    message id (``/compact`` refuses a conversation of fewer than two rounds).
    """

    def event(name: str, data: dict[str, Any]) -> str:
        return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"

    usage = {"input_tokens": 10, "output_tokens": 1}
    message = {
        "id": f"msg_fake_{next(_MESSAGE_IDS)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
    }
    parts = [
        event("message_start", {"message": {**message, "stop_reason": None, "stop_sequence": None, "usage": usage}})
    ]
    if block["type"] == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
    parts += [
        event("content_block_start", {"index": 0, "content_block": start}),
        event("content_block_delta", {"index": 0, "delta": delta}),
        event("content_block_stop", {"index": 0}),
        event(
            "message_delta",
            {"delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": {"output_tokens": 5}},
        ),
        event("message_stop", {}),
    ]
    return "".join(parts).encode()


def _has_tool_result(messages: list[Any], tool_use_id: str = "toolu_fake_read") -> bool:
    return any(
        isinstance(m, dict)
        and isinstance(m.get("content"), list)
        and any(
            isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == tool_use_id
            for b in m["content"]
        )
        for m in messages
    )


# A script of one's own: the request's body in, the one content block to answer with out (a ``text`` block
# ends the turn, a ``tool_use`` block asks for that tool).
Script = Callable[[dict[str, Any]], dict[str, Any]]


@contextmanager
def messages_api(
    read_path: str = "", call: tuple[str, dict[str, Any]] | None = None, script: Script | None = None
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve the script (`script`'s, when given, once the tool `call` names is listed); yields the base URL
    and the list the requests' bodies are appended to."""
    name, arguments = call if call is not None else ("Read", {"file_path": read_path})
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # the test's output is what it asserts
            pass

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(404, b"{}", "application/json")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            if "/count_tokens" in self.path:
                return self._send(200, b'{"input_tokens": 10}', "application/json")
            requests.append(body)
            tools = [t.get("name") for t in body.get("tools", []) if isinstance(t, dict)]
            messages = body.get("messages", [])
            waited = sum(_has_tool_result(messages, f"toolu_wait_{n}") for n in range(MAX_WAITS))
            if name not in tools and "WaitForMcpServers" in tools and waited < MAX_WAITS:
                # The session started before the plugin's server connected: wait for it, as a model would.
                block = {"type": "tool_use", "id": f"toolu_wait_{waited}", "name": "WaitForMcpServers", "input": {}}
                stream = _events(str(body.get("model")), block, "tool_use")
            elif script is not None:
                block = script(body)
                stop = "tool_use" if block["type"] == "tool_use" else "end_turn"
                stream = _events(str(body.get("model")), block, stop)
            elif name in tools and not _has_tool_result(messages):
                block = {"type": "tool_use", "id": "toolu_fake_read", "name": name, "input": arguments}
                stream = _events(str(body.get("model")), block, "tool_use")
            else:
                stream = _events(str(body.get("model")), {"type": "text", "text": ANSWER}, "end_turn")
            self._send(200, stream, "text/event-stream")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
