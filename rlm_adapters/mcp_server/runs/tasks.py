"""MCP tasks (protocol 2025-11-25): a task-augmented ``tools/call`` of ``rlm_query`` runs as a background run.

A client that negotiated 2025-11-25 may send ``tools/call`` with ``params.task`` (``{"ttl": ms}``). `TaskMiddleware`
answers it with a ``CreateTaskResult`` instead of the tool's result: it passes the call down the chain as
``rlm_query(..., background=True)``, so the task *is* a background run (`runs.RunBook`: the same principal, the
same ``--max-client-runs``/``--max-runs`` quotas, call cache and ``--keep-results`` lifetimes), and its task id is
the run id (``rlm_query(run_id=...)`` reaches it too). The SDK validates a 2025-11-25 ``tools/call`` result as a
``CallToolResult`` inside the middleware chain, so the answer must come from a middleware that does not call
through with the task; the runner trusts a short-circuiting middleware to own its result
(`mcp.server.runner.ServerRunner._on_request`).

``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` are request handlers of the lowlevel server
(none is a method the SDK's surface validation knows, so none is refused by it): ``tasks/result`` waits for the
run and returns exactly the ``CallToolResult`` a plain call returns (a tool error as an ``isError`` result), with
``_meta["io.modelcontextprotocol/related-task"]``. An id that is unknown, expired or another principal's gets one
and the same error. The server advertises ``capabilities.tasks`` and ``rlm_query``'s ``execution.taskSupport``
(``optional``) on 2025-11-25 sessions only; on other versions a ``task`` param is left to the SDK as before.

A task's ``ttl`` is the requested one bounded by ``--keep-results-for`` (absent: that), and counts from when the
run ends: its result is never forgotten before it could be fetched. With ``--cache`` tasks are kept in memory
only: after a restart, ``rlm_query(run_id=<task id>)`` still fetches the run. With a PostgreSQL ``--store`` a
durable principal's task is a row of the store (`shared_store.SharedRunStore`): any replica answers ``tasks/get``,
``tasks/result``, ``tasks/list`` and ``tasks/cancel`` for it, following a task that works on another replica in
the store, and running one whose replica was lost again here (under the server's ``--root`` folders).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolResult,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    GetTaskResult,
    ListTasksResult,
    PaginatedRequestParams,
    Task,
    TaskStatus,
    TextContent,
)

from rlm_adapters.errors import QueryError, StoreError
from rlm_adapters.mcp_server.callers import Client, current_client
from rlm_adapters.mcp_server.runs.background import Run, RunBook, Work
from rlm_adapters.mcp_server.runs.store import SharedRun

TASKS_VERSION = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
POLL_INTERVAL_MS = 1000
UNKNOWN_TASK = "taskId {task_id!r} names no task you can reach (unknown, expired, or not yours)"
# The tool arguments a task call must leave out: the task is the background run, reached through tasks/*.
_RUN_ARGUMENTS = ("background", "run_id", "wait", "cancel")


@dataclass
class TaskRecord:
    """What the tasks protocol says about a run beyond the run itself.

    Attributes:
        run: The background run.
        created_at: ISO 8601, UTC.
        ttl_ms: The retention granted (milliseconds).
        updated_at: When the run ended (ISO 8601, UTC), None while it works.
    """

    run: Run
    created_at: str
    ttl_ms: int
    updated_at: str | None = None


def _cut(value: Any) -> str:
    """`value` as an error message quotes it: at most 64 characters (a 400-digit int is not spelled out)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"(a {value.bit_length()}-bit integer)"
    return repr(value)[:64]


def _finite(number: int | float) -> bool:
    """Whether `number` is one a JSON peer's double holds (an int past 1.8e308 makes `float` raise)."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _iso(seconds: float | None) -> str:
    if seconds is None:
        return _now()
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


# How a task found in the shared store runs again once its replica is lost: the client's work for its arguments.
Resume = Callable[[Client], Callable[[Mapping[str, Any]], Work]]


class TaskMiddleware:
    """SDK middleware and handlers serving MCP tasks for one tool over a `RunBook`.

    Args:
        runs: The server's background runs.
        tool: The tool that may run as a task.
        resume: With a shared store, how a task whose replica was lost runs again here.
    """

    def __init__(self, runs: RunBook, tool: str = "rlm_query", resume: Resume | None = None) -> None:
        self.runs = runs
        self.tool = tool
        self.resume = resume
        self._tasks: dict[tuple[str, str], TaskRecord] = {}

    def install(self, server: MCPServer) -> None:
        """Register ``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` on `server`.

        The lowlevel server is where request handlers live (`MCPServer` exposes only extension methods, which
        would also advertise an extension this is not); a registered handler keeps the runner's
        initialization gate in front of it.
        """
        lowlevel = server._lowlevel_server
        lowlevel.add_request_handler("tasks/get", GetTaskRequestParams, self._get)
        lowlevel.add_request_handler("tasks/result", GetTaskPayloadRequestParams, self._result)
        lowlevel.add_request_handler("tasks/cancel", CancelTaskRequestParams, self._cancel)
        lowlevel.add_request_handler("tasks/list", PaginatedRequestParams, self._list)

    # -- the middleware ------------------------------------------------------------------------------
    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "initialize":
            return self._advertise(await call_next(ctx))
        if ctx.protocol_version != TASKS_VERSION:
            return await call_next(ctx)
        if ctx.method == "tools/list":
            return self._mark_tool(await call_next(ctx))
        params = ctx.params
        if ctx.method == "tools/call" and isinstance(params, Mapping) and params.get("task") is not None:
            return await self._create(ctx, params, call_next)
        return await call_next(ctx)

    def _advertise(self, result: HandlerResult) -> HandlerResult:
        if isinstance(result, dict) and result.get("protocolVersion") == TASKS_VERSION:
            capabilities = dict(result.get("capabilities") or {})
            capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
            result = {**result, "capabilities": capabilities}
        return result

    def _mark_tool(self, result: HandlerResult) -> HandlerResult:
        if isinstance(result, dict) and isinstance(result.get("tools"), list):
            tools = [
                {**tool, "execution": {"taskSupport": "optional"}}
                if isinstance(tool, dict) and tool.get("name") == self.tool
                else tool
                for tool in result["tools"]
            ]
            result = {**result, "tools": tools}
        return result

    async def _create(
        self, ctx: ServerRequestContext[Any, Any], params: Mapping[str, Any], call_next: CallNext
    ) -> HandlerResult:
        ttl_ms = self._ttl(params["task"])
        arguments = params.get("arguments")
        if params.get("name") != self.tool:
            raise MCPError(code=INVALID_PARAMS, message=f"tool {str(params.get('name'))[:64]!r} cannot run as a task")
        if arguments is not None and not isinstance(arguments, Mapping):
            raise MCPError(code=INVALID_PARAMS, message="tools/call: arguments must be an object")
        given = [name for name in _RUN_ARGUMENTS if arguments and name in arguments]
        if given:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"{self.tool} as a task: leave out {', '.join(given)} (the task is the background run; "
                "use tasks/get, tasks/result and tasks/cancel)",
            )
        background = {key: value for key, value in params.items() if key != "task"}
        background["arguments"] = {**(arguments or {}), "background": True}
        started = await call_next(dataclasses.replace(ctx, params=background))
        result = CallToolResult.model_validate(started, by_name=False) if isinstance(started, dict) else started
        if not isinstance(result, CallToolResult):
            raise MCPError(code=INVALID_PARAMS, message=f"{self.tool} did not start a task")
        structured = result.structured_content or {}
        if result.is_error or structured.get("status") != "running":
            # Refused before any run started (bad arguments, a quota): the call's own message, as an error.
            text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
            raise MCPError(code=INVALID_PARAMS, message=text or f"{self.tool} refused the call")
        principal = current_client().principal
        run = self.runs.get(principal, str(structured["run_id"]), stored=False)
        run.keep_seconds = ttl_ms / 1000
        record = TaskRecord(run, _now(), ttl_ms)
        self._tasks[(principal, run.run_id)] = record
        assert run.task is not None
        run.task.add_done_callback(lambda _task: setattr(record, "updated_at", _now()))
        shared = self.runs.shared_store
        if shared is not None and run.stored:
            shared.mark_task(run.run_id, ttl_ms)
            await self.runs.written()
        return CreateTaskResult(task=self._task(record))

    def _ttl(self, task: Any) -> int:
        """The retention granted: the requested ``ttl`` bounded by the server's (``--keep-results-for``)."""
        limit = max(int(self.runs.limits.keep_seconds * 1000), 1)
        if not isinstance(task, Mapping):
            message = f"task {_cut(task)} must be an object like {{'ttl': 60000}}"
            raise MCPError(code=INVALID_PARAMS, message=message)
        ttl = task.get("ttl")
        if ttl is None:
            return limit
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not _finite(ttl) or ttl <= 0:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"task.ttl {_cut(ttl)} must be a positive number of milliseconds (or left out)",
            )
        return max(int(min(ttl, limit)), 1)

    # -- tasks/* ------------------------------------------------------------------------------------
    async def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskRecord:
        if ctx.protocol_version != TASKS_VERSION:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
        client = current_client()
        self._forget_expired()
        record = self._tasks.get((client.principal, task_id))
        if record is None:
            record = await self._from_store(client, task_id)
        if record is None:
            raise MCPError(code=INVALID_PARAMS, message=UNKNOWN_TASK.format(task_id=task_id[:64]))
        return record

    async def _from_store(self, client: Client, task_id: str) -> TaskRecord | None:
        """A task another replica (or an earlier process) started, as the shared store has it."""
        shared = self.runs.shared_store
        if shared is None or not client.durable or len(task_id) > 64:
            return None
        try:
            stored = await asyncio.to_thread(shared.find, client.principal, task_id)
            if stored is None or stored.task_ttl_ms is None:
                return None
            resume = self.resume(client) if self.resume is not None else None
            run = self.runs.get(client.principal, task_id, resume, found=stored)
        except (QueryError, StoreError) as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        run.keep_seconds = stored.task_ttl_ms / 1000
        record = TaskRecord(run, _iso(stored.task_created_at), stored.task_ttl_ms)
        if stored.finished is not None:
            record.updated_at = _iso(stored.finished)
        assert run.task is not None
        run.task.add_done_callback(lambda _task: setattr(record, "updated_at", record.updated_at or _now()))
        self._tasks[(client.principal, task_id)] = record
        return record

    def _forget_expired(self) -> None:
        """Drop the records of runs the run book has forgotten (expired, or beyond ``--keep-results``)."""
        for key, record in list(self._tasks.items()):
            if not self.runs.knows(record.run):
                del self._tasks[key]

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> GetTaskResult:
        return GetTaskResult.model_validate(self._task(await self._find(ctx, params.task_id)).model_dump())

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> CancelTaskResult:
        record = await self._find(ctx, params.task_id)
        if self._status(record.run)[0] != "working":
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Cannot cancel task {params.task_id[:64]!r}: it is already {self._status(record.run)[0]}",
            )
        await self.runs.cancel(record.run)
        return CancelTaskResult.model_validate(self._task(record).model_dump())

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: GetTaskPayloadRequestParams) -> CallToolResult:
        record = await self._find(ctx, params.task_id)
        task = record.run.task
        assert task is not None
        # Waiting never stops the run: asyncio.wait does not cancel what it waits for.
        await asyncio.wait({task})
        meta = {RELATED_TASK: {"taskId": record.run.run_id}}
        if task.cancelled():
            raise MCPError(code=INVALID_PARAMS, message=f"task {record.run.run_id!r} was cancelled: it has no result")
        error = task.exception()
        if error is not None:
            text = self._error_text(error)
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True, _meta=meta)
        return task.result().model_copy(update={"meta": {**(task.result().meta or {}), **meta}})

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> ListTasksResult:
        if ctx.protocol_version != TASKS_VERSION:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
        client = current_client()
        self._forget_expired()
        mine = {
            run_id: self._task(record) for (owner, run_id), record in self._tasks.items() if owner == client.principal
        }
        shared = self.runs.shared_store
        if shared is not None and client.durable:
            # Tasks of other replicas too, as the store has them (listing runs none of them again).
            try:
                stored = await asyncio.to_thread(shared.tasks, client.principal)
            except StoreError as exc:
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
            for run_id, run in stored:
                mine.setdefault(run_id, self._stored_task(run_id, run))
        return ListTasksResult(tasks=list(mine.values()))

    def _stored_task(self, run_id: str, stored: SharedRun) -> Task:
        """A task as the shared store has it (another replica's), without following it."""
        status: TaskStatus
        if stored.state == "working":
            follower = Run(run_id=run_id, owner=stored.principal, elsewhere=stored.replica, lost=stored.lost)
            status, message = "working", follower.status().message
        elif stored.state == "done":
            result = CallToolResult.model_validate(stored.result or {"content": []})
            status, message = self._result_status(result)
        elif stored.state == "failed":
            status, message = "failed", f"Error executing tool {self.tool}: {stored.error}"
        else:
            status, message = "cancelled", "cancelled"
        created = _iso(stored.task_created_at)
        return Task(
            task_id=run_id,
            status=status,
            status_message=message,
            created_at=created,
            last_updated_at=_iso(stored.finished) if stored.finished is not None else created,
            ttl=stored.task_ttl_ms,
            poll_interval=POLL_INTERVAL_MS if status == "working" else None,
        )

    # -- shapes -------------------------------------------------------------------------------------
    def _task(self, record: TaskRecord) -> Task:
        status, message = self._status(record.run)
        return Task(
            task_id=record.run.run_id,
            status=status,
            status_message=message,
            created_at=record.created_at,
            last_updated_at=record.updated_at or record.created_at,
            ttl=record.ttl_ms,
            poll_interval=POLL_INTERVAL_MS if status == "working" else None,
        )

    def _error_text(self, error: BaseException) -> str:
        """The text a plain call's result has when its tool raised `error` (the SDK's words,
        `mcp.server.mcpserver.tools.base.Tool.run`: a crash's own text stays on the server)."""
        if isinstance(error, ToolError) and not isinstance(error, UnexpectedToolError):
            return f"Error executing tool {self.tool}: {error}"
        return f"Error executing tool {self.tool}"

    def _status(self, run: Run) -> tuple[TaskStatus, str]:
        task = run.task
        assert task is not None
        if not task.done():
            return "working", run.status().message
        if task.cancelled() or run.cancelled:
            return "cancelled", "cancelled"
        error = task.exception()
        if error is not None:
            return "failed", self._error_text(error)
        return self._result_status(task.result())

    @staticmethod
    def _result_status(result: CallToolResult) -> tuple[TaskStatus, str]:
        if result.is_error:
            text = " ".join(block.text for block in result.content if isinstance(block, TextContent))
            return "failed", text[:500]
        return "completed", "completed"


__all__ = ["RELATED_TASK", "UNKNOWN_TASK", "TaskMiddleware", "TaskRecord"]
