"""Call the `rlm-mcp` server's `rlm_query` tool over stdio with the MCP Python SDK, printing progress.

    export OPENAI_API_KEY=...            # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
    export RLM_MODEL=gpt-5-mini          # the server's root model; RLM_SUB_MODEL sets the sub-model
    python examples/mcp_client.py ./my-project "Where is the retry policy configured, and what is it?"

This is what Claude Code or any other MCP client does: start ``rlm-mcp --root FOLDER`` as a subprocess,
then call ``rlm_query`` with paths instead of pasting the files into its own context. The server reads
the files, runs the Recursive Language Model with its own keys, and sends progress notifications while
it works. Other settings: ``RLM_MCP_COMMAND`` (the server command, default this Python's
``-m rlm_adapters.mcp_server``), ``RLM_MCP_LOG_DIR`` (where the server writes trajectories).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys

from mcp import Client, StdioServerParameters


async def ask(folder: str, question: str) -> int:
    """Start the server over stdio with `folder` as its root and ask `question` about the whole folder."""
    command = shlex.split(
        os.environ.get("RLM_MCP_COMMAND", f"{shlex.quote(sys.executable)} -m rlm_adapters.mcp_server")
    )
    server = StdioServerParameters(
        command=command[0], args=[*command[1:], "--root", folder], env=dict(os.environ), cwd=folder
    )

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"  [{progress:5.2f}/{total or 0:.0f}] {message}", file=sys.stderr, flush=True)

    async with Client(server) as client:
        result = await client.call_tool("rlm_query", {"query": question, "paths": ["."]}, progress_callback=on_progress)
    if result.is_error:
        print(f"error: {result.content[0].text}", file=sys.stderr)  # type: ignore[union-attr]
        return 1
    info = result.structured_content or {}
    print(result.content[0].text)  # type: ignore[union-attr]
    read = ", ".join(f["path"] for f in info.get("files_read", []))
    print(
        f"\n{info.get('finish_reason')} after {info.get('iterations')} iterations, {info.get('sub_calls')} sub-calls,"
        f" ${info.get('cost_usd', 0):.4f}; read: {read}",
        file=sys.stderr,
    )
    for skipped in info.get("files_skipped", []):
        print(f"skipped {skipped['path']}: {skipped['reason']}", file=sys.stderr)
    print(f"trajectory: {info.get('trajectory_uri')}", file=sys.stderr)
    return 0


def main() -> int:
    """``python examples/mcp_client.py FOLDER QUESTION``."""
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    return asyncio.run(ask(os.path.abspath(sys.argv[1]), sys.argv[2]))


if __name__ == "__main__":
    raise SystemExit(main())
