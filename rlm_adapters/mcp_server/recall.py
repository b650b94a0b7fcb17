"""The ``rlm_recall`` tool: a question about Claude Code's own session transcripts, answered by an RLM.

Served only with ``--transcripts DIR``. Its context is the transcripts under DIR as documents (one per
session, `transcripts.as_context`), so its sources cite ``session:line``, and each cited line starts with
the turn's time. The run itself is `rlm_query`'s (the server hands in its ``answer``): same progress, same
lean result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from rlm_adapters.errors import RLMError
from rlm_adapters.files import LoadResult
from rlm_adapters.mcp_server.arguments import strict_schema
from rlm_adapters.mcp_server.config import ServerConfig
from rlm_adapters.mcp_server.current_session import current_session
from rlm_adapters.mcp_server.results import RLMQueryOutput
from rlm_adapters.mcp_server.transcripts import as_context, check_session, read_transcripts, since_filter

Answer = Callable[[Context, str, LoadResult], Awaitable[CallToolResult]]

DESCRIPTION = (
    "Search this agent's own earlier conversation (Claude Code's session transcripts, kept on disk in full "
    "even after a compaction) and answer one precise question about it. Use after a compaction, when the user "
    "refers to something said or done earlier, or before redoing work that may already have been done. "
    "session: 'current' (this session), a session id, or 'all'; since: an ISO time. Returns the answer with "
    "`sources` as session:line; each cited line starts with the turn's time."
)
QUERY_DESCRIPTION = "One precise question about the earlier conversation (e.g. 'which port did we choose for X')"
SESSION_DESCRIPTION = "'current' (the calling session, as the plugin's hook recorded it), a session id, or 'all'"
SINCE_DESCRIPTION = "Only turns at or after this ISO time or date, e.g. '2026-12-01T14:00' (UTC, as recorded)"


def sessions_for(config: ServerConfig, session: str) -> list[str] | None:
    """The session ids to read for `session` (None: all).

    Raises:
        ValueError, CacheError: the session is not one, or the current one is not known.
    """
    if session == "all":
        return None
    if session == "current":
        return [current_session([Path.cwd(), *config.roots])]
    return [check_session(session)]


def recall_tool(config: ServerConfig, answer: Answer) -> Tool:
    """The ``rlm_recall`` tool over ``config.transcripts``; `answer` runs the RLM on the context it reads."""
    folder = config.transcripts
    if folder is None:
        raise ValueError("rlm_recall needs config.transcripts (--transcripts DIR)")

    async def rlm_recall(
        ctx: Context,
        query: Annotated[str, Field(description=QUERY_DESCRIPTION)],
        session: Annotated[str, Field(description=SESSION_DESCRIPTION)] = "current",
        since: Annotated[str | None, Field(description=SINCE_DESCRIPTION)] = None,
    ) -> Annotated[CallToolResult, RLMQueryOutput]:
        try:
            if not query.strip():
                raise ValueError("`query` is empty; say what to find out about the earlier conversation")
            names = sessions_for(config, session)
            read = partial(read_transcripts, folder, names, max_bytes=config.max_bytes)
            entries, loaded = await anyio.to_thread.run_sync(read)
            kept = since_filter(entries, since)
            if not kept:
                raise ValueError(f"no turns of session {session!r}" + (f" since {since!r}" if since else ""))
            context = as_context(kept, loaded)
        except (RLMError, ValueError) as exc:
            raise ToolError(str(exc)) from exc
        return await answer(ctx, query, context)

    return strict_schema(
        Tool.from_function(
            rlm_recall,
            name="rlm_recall",
            title="Recall from this agent's session transcripts",
            description=DESCRIPTION,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True, idempotent_hint=False),
        )
    )


__all__ = ["DESCRIPTION", "recall_tool", "sessions_for"]
