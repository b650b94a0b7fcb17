"""The MCP tasks requests (protocol 2025-11-25), sent with the SDK's own `ClientSession`.

``tasks/get``, ``tasks/result``, ``tasks/cancel`` and ``tasks/list`` go through `ClientSession.send_request` with
the SDK's task types. A task-augmented ``tools/call`` cannot: the pinned SDK's client validates every 2025-11-25
``tools/call`` result as a ``CallToolResult`` before it looks at the requested type, so it refuses the
``CreateTaskResult`` the spec prescribes (`test_tasks.test_the_sdk_client_refuses_a_create_task_result` pins
this). It is sent through the same session's dispatcher, and the answer validated as a ``CreateTaskResult``.
"""

from __future__ import annotations

from typing import Any

from mcp.client.session import ClientSession
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    CancelTaskResult,
    CreateTaskResult,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    GetTaskResult,
    ListTasksRequest,
    ListTasksResult,
)


async def call_as_task(session: ClientSession, arguments: dict[str, Any], task: Any = None) -> CreateTaskResult:
    """``tools/call rlm_query`` with ``params.task`` (default ``{}``: the server's ttl)."""
    params = CallToolRequestParams(name="rlm_query", arguments=arguments).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    params["task"] = {} if task is None else task
    raw = await session._dispatcher.send_raw_request("tools/call", params, {})
    return CreateTaskResult.model_validate(raw, by_name=False)


async def get_task(session: ClientSession, task_id: str) -> GetTaskResult:
    return await session.send_request(GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), GetTaskResult)


async def task_result(session: ClientSession, task_id: str) -> CallToolResult:
    request = GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task_id))
    return await session.send_request(request, CallToolResult)


async def cancel_task(session: ClientSession, task_id: str) -> CancelTaskResult:
    request = CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, CancelTaskResult)


async def list_tasks(session: ClientSession) -> ListTasksResult:
    return await session.send_request(ListTasksRequest(), ListTasksResult)
