"""Call the `rlm-mcp` server's `rlm_query` tool over stdio with the MCP Python SDK, printing progress.

    export OPENAI_API_KEY=...            # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
    export RLM_MODEL=gpt-5-mini          # the server's root model; RLM_SUB_MODEL sets the sub-model
    python examples/mcp_client.py ./my-project "Where is the retry policy configured, and what is it?"

Without ``RLM_MODEL`` it still runs end to end: it starts the bundled fake OpenAI-compatible server
(`rlm_adapters.testing.FakeOpenAIServer`) on 127.0.0.1 with a demo root model that reads every file
through sub-calls and reports what it read, so you can see the protocol and the progress without a key.

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
from contextlib import ExitStack

from mcp import Client, StdioServerParameters

from rlm_adapters.testing import FakeOpenAIServer

# The demo root model: one cell that reads every file through batched sub-calls, then the answer.
DEMO_ROOT = [
    "```repl\n"
    "found = [a for a in llm_query_batched([d['text'][:4000] for d in context]) if a != 'NONE']\n"
    "largest = max(context, key=lambda d: len(d['text']))['id']\n"
    "total = sum(len(d['text']) for d in context)\n"
    "print(len(context), total, largest, found)\n"
    "```",
    "```repl\n"
    "FINAL(f'(demo model, no RLM_MODEL set) read {len(context)} files, {total:,} characters; '\n"
    "      f'the largest is {largest}; magic numbers found: {found or \"none\"}')\n"
    "```",
]


def demo_model(stack: ExitStack) -> dict[str, str]:
    """Start the bundled fake server for the run and return the variables that point the server at it."""
    server = stack.enter_context(FakeOpenAIServer(root=DEMO_ROOT))
    print(
        f"RLM_MODEL is not set: using the bundled fake model at {server.base_url} "
        "(set RLM_MODEL and OPENAI_API_KEY or OPENAI_BASE_URL for a real one)",
        file=sys.stderr,
    )
    return {"RLM_MODEL": "demo", "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "not-needed"}


async def ask(folder: str, question: str, env: dict[str, str]) -> int:
    """Start the server over stdio with `folder` as its root and ask `question` about the whole folder."""
    command = shlex.split(
        os.environ.get("RLM_MCP_COMMAND", f"{shlex.quote(sys.executable)} -m rlm_adapters.mcp_server")
    )
    server = StdioServerParameters(command=command[0], args=[*command[1:], "--root", folder], env=env, cwd=folder)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        print(f"  [{progress:5.2f}/{total or 0:.0f}] {message}", file=sys.stderr, flush=True)

    async with Client(server) as client:
        arguments = {"query": question, "paths": ["."], "detail": "full"}  # full: also the files read and usage
        result = await client.call_tool("rlm_query", arguments, progress_callback=on_progress)
    if result.is_error:
        print(f"error: {result.content[0].text}", file=sys.stderr)  # type: ignore[union-attr]
        return 1
    lean = result.structured_content or {}
    info = {**lean, **lean.get("detail", {})}
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
    with ExitStack() as stack:
        env = dict(os.environ)
        if not env.get("RLM_MODEL"):
            env.update(demo_model(stack))
        return asyncio.run(ask(os.path.abspath(sys.argv[1]), sys.argv[2], env))


if __name__ == "__main__":
    raise SystemExit(main())
