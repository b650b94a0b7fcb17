"""The MCP server object: the `rlm_query` tool and the trajectory resources, on `mcp.server.MCPServer`."""

from __future__ import annotations

import json
import logging
import re
from functools import partial
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlparse

import anyio
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp_types import CallToolResult, ListRootsResult, TextContent, ToolAnnotations
from pydantic import Field

from rlm_adapters.core.rlm import RLM
from rlm_adapters.core.trajectory import RLMLogger, read_trajectory
from rlm_adapters.errors import QueryError, RLMError
from rlm_adapters.mcp_server.config import ServerConfig
from rlm_adapters.mcp_server.progress import ProgressReporter
from rlm_adapters.mcp_server.prompts import add_prompts
from rlm_adapters.mcp_server.query import (
    MAX_CONCURRENT_LOADS,
    RLMQueryOutput,
    answer_text,
    build_rlm,
    run_query,
)
from rlm_adapters.mcp_server.sampling import ESTIMATED_NOTE, sampling_backends
from rlm_adapters.mcp_server.sessions import SessionPool

logger = logging.getLogger("rlm_adapters.mcp_server")

SERVER_NAME = "rlm"
INSTRUCTIONS = (
    "rlm_query answers a question about inputs far longer than your context window: pass file, folder or "
    "glob paths (read on the server, under its allowed roots) and/or inline text. A Recursive Language Model "
    "reads them in a sandboxed Python REPL and calls sub-models over pieces. Calls can take minutes and "
    "report progress. Each result names a trajectory, readable at rlm://trajectories/{id}."
)
TOOL_DESCRIPTION = (
    "Use for inputs far larger than you should read yourself: whole repositories, large logs, hundreds of "
    "documents, long transcripts. Pass `paths` (files, folders, globs under the server's roots), not pasted "
    "text. Ask one precise question per call. Takes seconds to minutes and costs model tokens; progress is "
    "reported. Returns the answer with `sources` (path:line ranges to open and check), usage and cost, "
    "the files read and skipped, and a trajectory id: read rlm://trajectories/{id} to see how it was found, "
    "then ask a narrower follow-up. For a few small files, read them yourself."
)
PATHS_DESCRIPTION = (
    "Files, folders (read recursively) or globs under the server's roots, relative to its first root, "
    'e.g. ["src", "logs/**/*.log"]. Prefer this over `text` for anything on disk'
)
TEXT_DESCRIPTION = "Inline context, only for text that is not on disk (e.g. a pasted transcript); with or without paths"
RECENT_LIMIT = 50
_TRAJECTORY_ID = re.compile(r"^[0-9a-f]{8,32}$")


def root_folders(listed: ListRootsResult) -> list[Path]:
    """The local folders among the roots a client listed (``file://`` URIs of existing folders)."""
    folders: list[Path] = []
    for root in listed.roots:
        uri = urlparse(str(root.uri))
        if uri.scheme == "file" and uri.netloc in ("", "localhost"):
            folder = Path(unquote(uri.path))
            if folder.is_dir():
                folders.append(folder.resolve())
    return folders


def request_roots(ctx: Context) -> ListRoots | ListRootsResult:
    """Ask clients that offer roots for them (the SDK injects the answer into `offered_roots`).

    The SDK sends ``roots/list`` mid-call, or from protocol 2026-07-28 on asks through an input request.
    """
    capabilities = ctx.client_capabilities
    if capabilities is not None and capabilities.roots is not None:
        return ListRoots()
    return ListRootsResult(roots=[])


def client_key(ctx: Context) -> str:
    """Who a `session` belongs to: the HTTP transport's session id, or the one client of a stdio server.

    Raises:
        QueryError: over stateless HTTP, where calls carry no client identity to keep a session under.
    """
    request = ctx.request_context.request
    if request is None:
        return "stdio"  # stdio (and in-memory) servers talk to exactly one client
    headers = getattr(request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    if not session_id:
        raise QueryError("`session` needs a stateful connection (stdio, or HTTP with an Mcp-Session-Id)")
    return f"http:{session_id}"


def build_server(config: ServerConfig) -> MCPServer:
    """The MCP server for `config`: tool ``rlm_query``, resources ``rlm://trajectories[/{id}]``, and the
    prompts ``summarize-logs``, ``find-in-repo`` and ``compare-documents``.

    Args:
        config: Roots, limits, model settings and the trajectory folder.
    """
    server: MCPServer = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=_version())
    trajectories = RLMLogger(config.log_dir)
    sessions = SessionPool()
    # One pool of file-loading threads for all calls; made on first use, inside the server's event loop.
    loaders: list[anyio.CapacityLimiter] = []

    async def rlm_query(
        query: Annotated[str, Field(description="One precise question or task about the inputs")],
        ctx: Context,
        offered_roots: Annotated[ListRootsResult, Resolve(request_roots)],
        paths: Annotated[
            list[str] | None,
            Field(description=PATHS_DESCRIPTION),
        ] = None,
        text: Annotated[str | None, Field(description=TEXT_DESCRIPTION)] = None,
        model: Annotated[str | None, Field(description="Root model (default: the server's)")] = None,
        sub_model: Annotated[str | None, Field(description="Sub-model (default: the server's)")] = None,
        max_depth: Annotated[
            int | None, Field(description="Recursion depth: 0 no sub-calls, 1 llm_query, 2 nested RLMs")
        ] = None,
        max_cost: Annotated[float | None, Field(description="Money cap for this call, in USD")] = None,
        timeout: Annotated[float | None, Field(description="Wall-clock cap for this call, seconds")] = None,
        session: Annotated[
            str | None,
            Field(
                description="Keep a persistent REPL under this name for this client: later calls see the "
                "earlier variables, their inputs as context_1, context_2, ... and past conversations as "
                "history_0, ... (`context` is the latest input)"
            ),
        ] = None,
        output_schema: Annotated[
            dict[str, Any] | None,
            Field(
                description="A JSON schema the answer must match: the value is validated (an invalid one goes "
                "back to the model once) and returned as `value` in the structured result"
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RLMQueryOutput]:
        roots = list(config.roots)
        if config.use_client_roots:
            roots += [r for r in root_folders(offered_roots) if r not in roots]
        if not loaders:
            loaders.append(anyio.CapacityLimiter(MAX_CONCURRENT_LOADS))
        reporter = ProgressReporter(
            ctx.report_progress, max_iterations=config.max_iterations, heartbeat=config.heartbeat
        )
        try:
            sampling = sampling_backends(
                ctx, model=model, configured=config.model, environ=config.environ, session=session
            )
            async with reporter:
                _result, output = await run_query(
                    config,
                    query=query,
                    paths=paths,
                    text=text,
                    roots=roots,
                    rlm_options={
                        "model": model,
                        "sub_model": sub_model,
                        "max_depth": max_depth,
                        "max_cost": max_cost,
                        "timeout": timeout,
                        "backends": sampling[0] if sampling else None,
                    },
                    callbacks=[reporter.on_event],
                    output_schema=output_schema,
                    limiter=loaders[0],
                    on_files=reporter.files_loaded,
                    session=None if session is None else partial(_session_rlm, ctx, session),
                )
                await reporter.notify("done")
            if sampling and sampling[1].estimated_calls:
                output.usage["estimated"] = ESTIMATED_NOTE
        except (RLMError, ValueError) as exc:
            # Our refusals (configuration, paths, limits) are one-line messages meant for the agent.
            raise ToolError(str(exc)) from exc
        return CallToolResult(
            content=[TextContent(type="text", text=answer_text(output))],
            structured_content=output.model_dump(mode="json"),
            is_error=output.finish_reason == "error",
        )

    async def _session_rlm(ctx: Context, name: str, options: dict[str, Any]) -> RLM:
        build = partial(build_rlm, config, **options, persistent=True)
        return await sessions.get(client_key(ctx), name, options, build)

    add_prompts(server)
    server.add_tool(
        rlm_query,
        name="rlm_query",
        title="Recursive Language Model query",
        description=TOOL_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True, idempotent_hint=False),
    )

    @server.resource(
        "rlm://trajectories",
        name="recent-trajectories",
        description=f"The {RECENT_LIMIT} most recent runs: id, time, query and finish",
        mime_type="application/json",
    )
    def recent_trajectories() -> str:
        return json.dumps(_recent(config.log_dir), ensure_ascii=False)

    @server.resource(
        "rlm://trajectories/{trajectory_id}",
        name="trajectory",
        description="One run's trajectory: its header and every event (long fields cut)",
        mime_type="application/json",
    )
    def trajectory(trajectory_id: str) -> str:
        if not _TRAJECTORY_ID.match(trajectory_id):
            raise ResourceError(f"{trajectory_id!r} is not a trajectory id (8 to 32 lowercase hex digits)")
        path = trajectories.find(trajectory_id) if config.log_dir.is_dir() else None
        if path is None:
            raise ResourceError(f"no trajectory {trajectory_id!r} in {config.log_dir}")
        header, events = read_trajectory(path)
        return json.dumps({"header": header, "events": events}, ensure_ascii=False, default=str)

    return server


def _recent(log_dir: Path) -> list[dict[str, Any]]:
    """Summaries of the newest trajectories (file names start with a UTC stamp, so they sort by time)."""
    if not log_dir.is_dir():
        return []
    runs: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob("rlm_*.jsonl"), reverse=True)[:RECENT_LIMIT]:
        header, events = read_trajectory(path)
        final: dict[str, Any] = next(
            (e for e in reversed(events) if e.get("kind") == "final" and e.get("depth") == 0), {}
        )
        run_id = str(header.get("run_id", ""))
        runs.append(
            {
                "id": run_id,
                "uri": f"rlm://trajectories/{run_id}",
                "time": header.get("time"),
                "query": str(header.get("query") or "")[:200],
                "finish_reason": final.get("finish_reason"),
            }
        )
    return runs


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlm-adapters")
    except PackageNotFoundError:
        return "0"


__all__ = ["INSTRUCTIONS", "TOOL_DESCRIPTION", "RLMQueryOutput", "build_server", "root_folders"]
