"""The MCP server object: the `rlm_query` tool and the trajectory resources, on `mcp.server.MCPServer`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import unquote, urlparse

import anyio
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve
from mcp_types import CallToolResult, ListRootsResult, TextContent
from pydantic import Field

from rlm_adapters._extras import require
from rlm_adapters.core.adapter_kit import new_run_id
from rlm_adapters.core.cache import CallCache, SQLiteCallCache, is_postgres, open_cache, store_keys
from rlm_adapters.errors import QueryError, RLMError
from rlm_adapters.files import LoadResult
from rlm_adapters.mcp_server.callers import Client, ClientMiddleware, current_client
from rlm_adapters.mcp_server.keys import key_account, resumed_account, unpaid
from rlm_adapters.mcp_server.prompts import add_prompts
from rlm_adapters.mcp_server.recall.tool import INSTRUCTIONS as RECALL_INSTRUCTIONS
from rlm_adapters.mcp_server.recall.tool import recall_tool
from rlm_adapters.mcp_server.replica import Lease, Replica
from rlm_adapters.mcp_server.runs.arguments import StrictArguments
from rlm_adapters.mcp_server.runs.background import Run, RunBook, Work
from rlm_adapters.mcp_server.runs.budget_elicit import budget_hook
from rlm_adapters.mcp_server.runs.inputs import MAX_CONCURRENT_LOADS
from rlm_adapters.mcp_server.runs.progress import ProgressReporter, SendProgress
from rlm_adapters.mcp_server.runs.query import RUN_ARGUMENTS, build_rlm, run_query, run_turn
from rlm_adapters.mcp_server.runs.results import (
    DETAILS,
    Detail,
    RLMQueryOutput,
    answer_text,
    check_detail,
    lean,
    refusal,
)
from rlm_adapters.mcp_server.runs.sampling import ESTIMATED_NOTE, SamplingUsage, sampling_backends
from rlm_adapters.mcp_server.runs.store import RunStore, runs_path
from rlm_adapters.mcp_server.runs.tasks import TaskMiddleware
from rlm_adapters.mcp_server.runs.tool_schema import MAX_WAIT, check_fetch, check_wait, rlm_query_tool
from rlm_adapters.mcp_server.sessions.live import MCPSessions
from rlm_adapters.mcp_server.sessions.store import SessionStore, store_path
from rlm_adapters.mcp_server.setup.config import ServerConfig, default_log_dir
from rlm_adapters.mcp_server.trajectories import TrajectoryBook, add_trajectory_resources, private_log_dir

if TYPE_CHECKING:  # the engine loads at the first rlm_query (`query.build_rlm`), not at start-up
    from rlm_adapters.core import RLM
    from rlm_adapters.core.cache import KeyAccount
    from rlm_adapters.mcp_server.runs.shared_store import SharedRunStore
    from rlm_adapters.mcp_server.sessions.shared_store import SharedSessionStore

logger = logging.getLogger("rlm_adapters.mcp_server")

SERVER_NAME = "rlm"
INSTRUCTIONS = (
    "rlm_query answers a question about inputs far longer than your context window: pass file, folder or "
    "glob paths (read on the server, under its allowed roots) and/or inline text. A Recursive Language Model "
    "reads them in a sandboxed Python REPL and calls sub-models over pieces. Calls can take minutes and "
    "report progress. Each result names a trajectory, readable at rlm://trajectories/{id}."
)
TOOL_DESCRIPTION = (
    "Use for inputs far larger than you should read yourself: whole repositories, big logs, many documents. "
    "Pass `paths` (files, folders, globs under the server's roots), not pasted text. Ask one precise question "
    "per call. Takes seconds to minutes and costs model tokens. Returns the answer, `sources` (path:line ranges "
    "to check), unsupported claims, cost and a trajectory id (rlm://trajectories/{id} shows how it was found); "
    "detail='full' adds claims, files, usage. For a few small files, read them yourself. If a call may outlast "
    "your tool timeout, pass `background: true` for a `run_id`, then call rlm_query(run_id=..., wait=60) until "
    "it returns the answer; `cancel: true` stops it."
)
QUERY_DESCRIPTION = "One precise question or task about the inputs (required unless run_id is given)"
BACKGROUND_DESCRIPTION = (
    "Start the run and return at once with its run_id (status running); the run goes on in the server. Use "
    "when it may take longer than your tool timeout, or to do other work meanwhile"
)
RUN_ID_DESCRIPTION = (
    "A background run's id: returns its answer (as a direct call would) once it has one, else its progress; "
    "pass nothing but wait or cancel with it"
)
WAIT_DESCRIPTION = (
    f"With run_id (or background): wait up to this many seconds (at most {MAX_WAIT:g}) for the answer before "
    "returning the run's progress; progress is reported while waiting"
)
PATHS_DESCRIPTION = (
    "Files, folders (read recursively) or globs under the server's roots, relative to its first root, "
    'e.g. ["src", "logs/**/*.log"]. Prefer this over `text` for anything on disk'
)
DETAIL_DESCRIPTION = (
    "lean (default): the answer, sources, unsupported claims, finish reason and cost; full: also every claim "
    "with its span, the files read and skipped, usage by model and timings (under `detail`)"
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


class ServerTools:
    """What the server's tools share, for the life of one server: the call cache, the ``session=`` REPLs,
    the background runs, the trajectory book and the file loaders' limit.

    Args:
        config: Roots, limits, model settings, the trajectory folder and the call cache (opened here).
        runs: Where ``background`` runs are kept (default: a new `RunBook` with ``config.runs``).
        stopping: Set when the server begins to stop, so that ``session=`` REPLs are kept for a restart.

    Raises:
        CacheError: ``config.cache`` is not a call cache file (naming it and why; it is left as it is).
    """

    def __init__(self, config: ServerConfig, runs: RunBook | None, stopping: threading.Event | None) -> None:
        self.config = config
        self.call_cache = _call_cache(config)
        # The store's keys (``rlm keys``), each its own principal that pays for its calls.
        self.keys = store_keys(self.call_cache) if config.store and is_postgres(config.store) else None
        self.background_runs = runs if runs is not None else run_book(config)
        store = _session_store(config, self.background_runs)
        self.sessions = MCPSessions(config.sessions, store, stopping, shared=config.http and not config.token)
        self.book = TrajectoryBook()
        self._loads: anyio.CapacityLimiter | None = None

    @property
    def loads(self) -> anyio.CapacityLimiter:
        """One pool of file-loading threads for all calls, made on first use (inside the server's loop)."""
        if self._loads is None:
            self._loads = anyio.CapacityLimiter(MAX_CONCURRENT_LOADS)
        return self._loads

    async def rlm_query(
        self,
        ctx: Context,
        offered_roots: Annotated[ListRootsResult, Resolve(request_roots)],
        query: Annotated[str | None, Field(description=QUERY_DESCRIPTION)] = None,
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
        run_timeout: Annotated[
            float | None, Field(description="Wall-clock cap of this call's run, seconds (the server's is the most)")
        ] = None,
        timeout: Annotated[float | None, Field(description="The older name of run_timeout")] = None,
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
        background: Annotated[bool, Field(description=BACKGROUND_DESCRIPTION)] = False,
        run_id: Annotated[str | None, Field(description=RUN_ID_DESCRIPTION)] = None,
        wait: Annotated[float | None, Field(description=WAIT_DESCRIPTION)] = None,
        cancel: Annotated[bool, Field(description="With run_id: stop that run (its sandbox is closed)")] = False,
        detail: Annotated[
            str | None, Field(description=DETAIL_DESCRIPTION, json_schema_extra={"enum": list(DETAILS)})
        ] = None,
    ) -> Annotated[CallToolResult, RLMQueryOutput]:
        """The ``rlm_query`` tool: a run now, a background run started, or one reached by its `run_id`."""
        config, background_runs = self.config, self.background_runs
        client = current_client(ctx)
        roots = list(config.roots)
        if uses_client_roots(config, client):
            roots += [r for r in root_folders(offered_roots) if r not in roots]
        arguments: dict[str, Any] = {"query": query, "paths": paths, "text": text, "model": model}
        arguments |= {"sub_model": sub_model, "max_depth": max_depth, "max_cost": max_cost}
        arguments |= {"run_timeout": run_timeout, "timeout": timeout}
        arguments |= {"session": session, "output_schema": output_schema, "detail": detail}
        try:
            check_detail(detail)
            seconds = check_wait(wait)
            if run_id is not None:
                check_fetch(run_id, arguments | {"background": background or None}, seconds if cancel else None)

                resume = self.resumer(client, roots)
                # A cancel does not start a run lost with its replica again only to stop it: its row is marked.
                reached = await background_runs.find(
                    client.principal, run_id, resume, stored=client.durable, take_over=not cancel
                )
                return await background_runs.reach(reached, wait=seconds, cancel=cancel, send=ctx.report_progress)
            if cancel or (wait is not None and not background):
                raise QueryError(
                    "wait and cancel are for run_id=... (a background run's id); wait also goes with background=true"
                )
            if query is None:
                raise QueryError("`query` is missing; say what to find out about the paths or text")
            account = await key_account(self.keys, client, model or config.model)
            sampling = sampling_backends(
                ctx,
                model=model,
                configured=config.model,
                environ=config.environ,
                session=session,
                background=background,
            )
        except (RLMError, ValueError) as exc:
            raise refusal(exc) from exc
        call = self.call_for(client, ctx, roots, arguments, sampling, account)
        if not background:
            return await call(ctx.report_progress)
        try:
            client.require_background()
            # Only a durable principal's run is written down: nobody else could fetch it after a restart.
            kept = arguments if client.durable else None
            started = background_runs.start(client.principal, lambda run: call(run.relay, run), kept)
            background_runs.watch(client)
        except (RLMError, ValueError) as exc:
            raise refusal(exc) from exc
        await background_runs.written()
        return await background_runs.reach(started, wait=seconds, send=ctx.report_progress)

    def resumer(self, client: Client, roots: list[Path]) -> Callable[[Mapping[str, Any]], Work]:
        """How `client`'s run that an earlier server (or a lost replica) started and did not finish runs again
        here, under `roots`, its model calls replaying from the cache."""

        def resume(stored: Mapping[str, Any]) -> Work:
            account = resumed_account(self.keys, client)  # a key's resumed run is paid by that key still
            return lambda run: self.call_for(client, None, roots, stored, None, account)(run.relay, run)

        return resume

    def call_for(
        self,
        client: Client,
        ctx: Context | None,
        roots: list[Path],
        arguments: Mapping[str, Any],
        sampling: tuple[dict[str, Any], SamplingUsage] | None = None,
        account: KeyAccount | None = None,
    ) -> Callable[..., Coroutine[Any, Any, CallToolResult]]:
        """The work of a call with these `arguments` (`rlm_query`'s names): ``(send, run=None) -> result``
        (`account`: the store's key that pays for its calls)."""
        options = {name: arguments.get(name) for name in RUN_ARGUMENTS}
        return partial(
            self.answer,
            client,
            ctx=ctx,
            query=str(arguments["query"]),
            paths=arguments.get("paths"),
            text=arguments.get("text"),
            roots=roots,
            rlm_options={**options, "backends": sampling[0] if sampling else None},
            output_schema=arguments.get("output_schema"),
            session=arguments.get("session"),
            sampling=sampling[1] if sampling else None,
            detail=check_detail(arguments.get("detail")),
            account=account,
        )

    async def answer(
        self,
        client: Client,
        send: SendProgress,
        run: Run | None = None,
        *,
        ctx: Context | None,
        query: str,
        paths: list[str] | None,
        text: str | None,
        roots: list[Path],
        rlm_options: dict[str, Any],
        output_schema: dict[str, Any] | None,
        session: str | None,
        sampling: SamplingUsage | None,
        detail: Detail = "lean",
        loaded: LoadResult | None = None,
        account: KeyAccount | None = None,
    ) -> CallToolResult:
        """One call's run, reporting progress to `send` (for a background `run`, its relay)."""
        config = self.config
        trajectory_id = new_run_id()
        self.book.record(client, trajectory_id)
        reporter = ProgressReporter(send, max_iterations=config.max_iterations, heartbeat=config.heartbeat)
        if run is not None:
            run.progress = reporter
        # A resumed run has no caller (ctx None) to ask about its budget.
        on_budget = (
            None if ctx is None else budget_hook(ctx, reporter.tally, config.max_cost, background=run is not None)
        )
        try:
            async with reporter:
                _result, output = await run_query(
                    config,
                    query=query,
                    paths=paths,
                    text=text,
                    roots=roots,
                    rlm_options=rlm_options,
                    callbacks=[reporter.on_event],
                    observers=[reporter.observer()],
                    output_schema=output_schema,
                    limiter=self.loads,
                    on_files=reporter.files_loaded,
                    on_converting=reporter.converting,
                    session=None
                    if session is None
                    else partial(self.session_rlm, client, session, _turn(query, paths, text, output_schema), roots),
                    run_id=trajectory_id,
                    cache=self.call_cache,
                    on_budget=on_budget,
                    loaded=loaded,
                    account=account,
                )
                refused = unpaid(account)
                if refused is not None:
                    raise refused
                # A resumed run says so once, in its last progress message as in its result.
                await reporter.notify(f"done · {output.resumed}" if output.resumed else "done")
            if sampling is not None and sampling.estimated_calls:
                output.full().usage["estimated"] = ESTIMATED_NOTE
        except (RLMError, ValueError) as exc:
            # Our refusals (configuration, paths, limits) are one-line messages meant for the agent.
            raise refusal(exc) from exc
        # On a worker thread: the answer is copied into the text and the structured content, which for tens of
        # MiB is seconds that would hold every other client's call (four 40 MiB answers: 2.9-4.8 s).
        return await asyncio.to_thread(_tool_result, output, detail, typed=output_schema is not None)

    def session_rlm(
        self, client: Client, name: str, turn: dict[str, Any], roots: list[Path], options: dict[str, Any]
    ) -> contextlib.AbstractAsyncContextManager[RLM]:
        """The client's persistent RLM named `name`, leased for one call (made, or restored, when missing)."""
        build = partial(build_rlm, self.config, **options, persistent=True, cache=self.call_cache)
        return self.sessions.lease(client, name, options, build, turn, partial(self.restore, roots=roots))

    async def restore(self, rlm: RLM, turns: list[dict[str, Any]], *, roots: list[Path]) -> None:
        """Run a session's recorded calls again in its new `rlm`, under the roots of the call restoring it."""
        for turn in turns:
            await run_turn(self.config, rlm, **turn, roots=roots, limiter=self.loads)

    async def recall(self, ctx: Context, query: str, loaded: LoadResult) -> CallToolResult:
        """An ``rlm_recall`` call: `rlm_query`'s run, over the transcripts already read."""
        config = self.config
        try:
            sampling = sampling_backends(ctx, model=None, configured=config.model, environ=config.environ)
        except (RLMError, ValueError) as exc:
            raise refusal(exc) from exc
        call = self.call_for(current_client(ctx), ctx, [], {"query": query}, sampling)
        return await call(ctx.report_progress, loaded=loaded)


def build_server(
    config: ServerConfig, runs: RunBook | None = None, *, stopping: threading.Event | None = None
) -> MCPServer:
    """The MCP server for `config`: tool ``rlm_query`` (and ``rlm_recall`` with ``config.transcripts``, which
    its instructions then name), resources ``rlm://trajectories[/{id}]``, and the
    prompts ``summarize-logs``, ``find-in-repo`` and ``compare-documents``.

    Args:
        config: Roots, limits, model settings, the trajectory folder and the call cache (opened here).
        runs: Where ``background`` runs are kept (default: a new `RunBook` with ``config.runs``); the caller
            that passes one closes it when the server stops (`RunBook.aclose`).
        stopping: Set when the server begins to stop (HTTP: `transports.http_app` sets it), so that the
            ``session=`` REPLs of the MCP sessions it then ends are kept for a restart (``--cache``).

    Raises:
        CacheError: ``config.cache`` is not a call cache file (naming it and why; it is left as it is).
    """
    tools = ServerTools(config, runs, stopping)
    tool = rlm_query_tool(tools.rlm_query, TOOL_DESCRIPTION, RLMQueryOutput)
    served = [tool] if config.transcripts is None else [tool, recall_tool(config, tools.recall)]
    tasks = TaskMiddleware(tools.background_runs, tool.name, partial(tools.resumer, roots=list(config.roots)))
    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS if config.transcripts is None else f"{INSTRUCTIONS} {RECALL_INSTRUCTIONS}",
        version=_version(),
        middleware=[ClientMiddleware(), tasks, StrictArguments(served)],
        lifespan=partial(_lifespan, config, tools.sessions, tools.call_cache, tools.background_runs, [0]),
        tools=served,
    )
    tasks.install(server)
    add_prompts(server)
    private_log_dir(config.log_dir, default=config.log_dir == default_log_dir())
    add_trajectory_resources(server, config.log_dir, tools.book)
    return server


def _tool_result(output: RLMQueryOutput, detail: Detail, *, typed: bool) -> CallToolResult:
    """The tool's result of a finished call: the answer's text, and the structured content at `detail`."""
    shown = output if detail == "full" else lean(output)
    return CallToolResult(
        content=[TextContent(type="text", text=answer_text(output))],
        structured_content=shown.structured(typed=typed),
        is_error=output.finish_reason == "error",
    )


def _turn(query: str, paths: list[str] | None, text: str | None, schema: dict[str, Any] | None) -> dict[str, Any]:
    """A session call as `session_store` writes it down (what `query.run_turn` takes again)."""
    return {"query": query, "paths": paths, "text": text, "output_schema": schema}


def _call_cache(config: ServerConfig) -> CallCache | None:
    """The server's call cache: the ``--store`` (PostgreSQL, shared by replicas), else ``--cache``'s file."""
    if config.store is not None:
        return open_cache(config.store)[0]
    return SQLiteCallCache(config.cache) if config.cache is not None else None


def run_book(config: ServerConfig) -> RunBook:
    """Where the server's background runs are kept: with ``--cache``, also written beside it (`run_store`);
    with a PostgreSQL ``--store`` over HTTP, in the store its replicas share (`shared_store.SharedRunStore`).

    Raises:
        CacheError: the runs file beside the cache is not one this server wrote.
        StoreError: the store cannot be reached or used (naming it without its password).
        ConfigurationError: ``RLM_LEASE_SECONDS`` is not a number of seconds.
    """
    store: RunStore | SharedRunStore | None = None
    if config.http and config.store is not None and is_postgres(config.store):
        # Over HTTP only: over stdio every user's principal is ``local``, the same on every machine on the store.
        store = _shared_runs(config)
    elif config.cache is not None:
        store = RunStore(runs_path(config.cache), config.runs.keep_results, config.runs.keep_seconds)
    # Without a token over HTTP every MCP session is a principal (made for free): each gets a share.
    return RunBook(config.runs, store=store, shared=config.http and not config.token)


def _shared_runs(config: ServerConfig) -> SharedRunStore:
    """The runs table of the store, and this process as one of its replicas (its id logged)."""
    assert config.store is not None
    for module in ("psycopg", "psycopg_pool"):
        require(module, extra="store", feature="a postgresql:// store")
    from rlm_adapters.core.cache import PostgresStore
    from rlm_adapters.mcp_server.runs.shared_store import SharedRunStore

    lease = Lease.from_environment(os.environ if config.environ is None else config.environ)
    # A lease must not lapse while a renewal waits on a store that went away: the waits are a renewal's interval.
    wait = min(10.0, max(1.0, lease.renew_every))
    database = PostgresStore(config.store, connect_timeout=wait, max_connections=4, retry_after=wait)
    replica = Replica(lease)
    logger.info(
        "replica %s: background runs, tasks and session records in the store %s (leases of %g s)",
        replica.id,
        database.shown,
        lease.expires_after,
    )
    return SharedRunStore(database, config.runs.keep_results, config.runs.keep_seconds, replica)


def _session_store(config: ServerConfig, runs: RunBook) -> SessionStore | SharedSessionStore | None:
    """Where ``session=`` records are kept: in the shared store beside the runs, else beside ``--cache``."""
    shared = runs.shared_store
    if shared is not None:
        from rlm_adapters.mcp_server.sessions.shared_store import SharedSessionStore

        return SharedSessionStore(shared.database, shared.replica, config.sessions.idle_timeout)
    return SessionStore(store_path(config.cache), config.sessions.idle_timeout) if config.cache else None


@contextlib.asynccontextmanager
async def _lifespan(
    config: ServerConfig,
    sessions: MCPSessions,
    cache: CallCache | None,
    runs: RunBook,
    entered: list[int],
    _server: MCPServer,
) -> AsyncIterator[ServerConfig]:
    """The server's life: handlers find `config` as the lifespan context; every session is closed when the
    server stops (an in-process server: when its last client leaves), a replica gives up its leases (uvicorn
    ends the process on the signal that stopped it right after), and the call cache's thread ends (a later
    call starts it again)."""
    entered[0] += 1
    try:
        yield config
    finally:
        entered[0] -= 1
        if entered[0] == 0:
            await sessions.aclose()
            await runs.release()
            if cache is not None:
                await asyncio.to_thread(cache.close)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlm-adapters")
    except PackageNotFoundError:
        return "0"


__all__ = ["INSTRUCTIONS", "TOOL_DESCRIPTION", "RLMQueryOutput", "build_server", "root_folders", "run_book"]
