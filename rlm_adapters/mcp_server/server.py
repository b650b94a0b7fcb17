"""The MCP server object: the `rlm_query` tool and the trajectory resources, on `mcp.server.MCPServer`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import unquote, urlparse

import anyio
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ListRootsResult, TextContent, ToolAnnotations
from pydantic import Field

from rlm_adapters.core.trajectory import new_run_id
from rlm_adapters.errors import RLMError
from rlm_adapters.mcp_server.config import ServerConfig
from rlm_adapters.mcp_server.identity import Client, ClientMiddleware, current_client
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
from rlm_adapters.mcp_server.sessions import MCPSessions
from rlm_adapters.mcp_server.trajectories import TrajectoryBook, add_trajectory_resources

if TYPE_CHECKING:  # the engine loads at the first rlm_query (`query.build_rlm`), not at start-up
    from rlm_adapters.core.rlm import RLM

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


def uses_client_roots(config: ServerConfig, client: Client) -> bool:
    """Whether the roots `client` offers are added to ``--root``: over stdio unless ``--no-client-roots``
    (the client is the user); over HTTP only with ``--allow-client-roots`` (a client must not widen what the
    operator allowed)."""
    if client.kind == "local":
        return config.use_client_roots
    return config.allow_client_roots


def request_roots(ctx: Context) -> ListRoots | ListRootsResult:
    """Ask for the client's roots when it offers them and they will be used (the SDK injects the answer into
    `offered_roots`: ``roots/list`` mid-call, or from protocol 2026-07-28 on an input request)."""
    config = ctx.request_context.lifespan_context
    capabilities = ctx.client_capabilities
    offered = capabilities is not None and capabilities.roots is not None
    if offered and isinstance(config, ServerConfig) and uses_client_roots(config, current_client(ctx)):
        return ListRoots()
    return ListRootsResult(roots=[])


def build_server(config: ServerConfig) -> MCPServer:
    """The MCP server for `config`: tool ``rlm_query``, resources ``rlm://trajectories[/{id}]``, and the
    prompts ``summarize-logs``, ``find-in-repo`` and ``compare-documents``.

    Args:
        config: Roots, limits, model settings and the trajectory folder.
    """
    sessions = MCPSessions(config.sessions)
    book = TrajectoryBook()
    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        version=_version(),
        middleware=[ClientMiddleware()],
        lifespan=partial(_lifespan, config, sessions, [0]),
    )
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
        client = current_client(ctx)
        roots = list(config.roots)
        if uses_client_roots(config, client):
            roots += [r for r in root_folders(offered_roots) if r not in roots]
        run_id = new_run_id()
        book.record(client, run_id)
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
                    session=None if session is None else partial(_session_rlm, client, session),
                    run_id=run_id,
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

    def _session_rlm(client: Client, name: str, options: dict[str, Any]) -> contextlib.AbstractAsyncContextManager[RLM]:
        build = partial(build_rlm, config, **options, persistent=True)
        return sessions.lease(client, name, options, build)

    add_prompts(server)
    server.add_tool(
        rlm_query,
        name="rlm_query",
        title="Recursive Language Model query",
        description=TOOL_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True, idempotent_hint=False),
    )

    add_trajectory_resources(server, config.log_dir, book)
    return server


@contextlib.asynccontextmanager
async def _lifespan(
    config: ServerConfig, sessions: MCPSessions, entered: list[int], _server: MCPServer
) -> AsyncIterator[ServerConfig]:
    """The server's life: handlers find `config` as the lifespan context; every session is closed when the
    server stops (an in-process server: when its last client leaves)."""
    entered[0] += 1
    try:
        yield config
    finally:
        entered[0] -= 1
        if entered[0] == 0:
            await sessions.aclose()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlm-adapters")
    except PackageNotFoundError:
        return "0"


__all__ = ["INSTRUCTIONS", "TOOL_DESCRIPTION", "RLMQueryOutput", "build_server", "root_folders"]
