"""A stand-in MCP server for when rlm-mcp cannot start: it says why, in the client.

`start-rlm-mcp.sh` runs it (``python3 -I -S unavailable.py REASON``) when no way to start the real server
exists or a setting is refused. Without it Claude Code shows only "Failed to connect" and the reason sits in
a log file. With it the server connects and its instructions carry the reason, which Claude Code puts in the
session's "MCP Server Instructions", so the agent can tell the user the fix; ``tools/list`` fails with the
reason, so ``claude mcp list`` flags the server (``! Connected · tools fetch failed``) instead of calling it
connected, and ``claude mcp get plugin:rlm:rlm`` shows the reason as its ``Issue:``. A client that calls a
tool all the same gets the reason as a tool error.

Standard library only (it runs where rlm-adapters is not installed), newline-delimited JSON-RPC over stdio
as MCP's stdio transport has it. It reads nothing but its input and writes nothing but its replies.
"""

from __future__ import annotations

import json
import sys
from typing import Any

# The protocol versions this stand-in can speak; a client asking for another gets the newest.
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MAX_LINE = 1 << 20  # a request longer than this is dropped, never buffered whole


def reply(request: dict[str, Any], reason: str) -> dict[str, Any] | None:
    """The answer to one JSON-RPC message (None for a notification)."""
    if "id" not in request:
        return None
    method = request.get("method")
    given = request.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    result: dict[str, Any]
    if method == "initialize":
        asked = params.get("protocolVersion")
        result = {
            "protocolVersion": asked if asked in VERSIONS else VERSIONS[-1],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "rlm", "version": "unavailable"},
            "instructions": reason,
        }
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        # Failing here is what makes `claude mcp list` say something is wrong (a tool list would read "Connected").
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": reason}}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": reason}], "isError": True}
    elif method in ("resources/list", "prompts/list"):
        result = {method.split("/")[0]: []}
    else:
        error = {"code": -32601, "message": f"{reason} (method {str(method)[:64]!r} not served)"}
        return {"jsonrpc": "2.0", "id": request["id"], "error": error}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def serve(reason: str) -> None:
    """Answer MCP requests on stdin until it closes."""
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline(MAX_LINE)
        if not line:
            return
        if len(line) >= MAX_LINE and not line.endswith(b"\n"):
            while (more := stdin.readline(MAX_LINE)) and not more.endswith(b"\n"):
                pass  # the rest of an oversized line
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        answer = reply(request, reason) if isinstance(request, dict) else None
        if answer is not None:
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    serve(" ".join(sys.argv[1:]) or "rlm-mcp cannot start")
