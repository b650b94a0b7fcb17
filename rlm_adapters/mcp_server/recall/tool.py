"""The ``rlm_recall`` tool: a question about Claude Code's own session transcripts, answered by an RLM.

Served only with ``--transcripts DIR``. Its context is the transcripts of the current project (its folder
under DIR, as Claude Code names it: `transcripts.project_folder`), or of every project under DIR with
``--recall-projects all``, as documents (one per session, `transcripts.as_context`), so its sources cite
``session:line``; the result names each cited turn's time beside it (`with_times`), so the agent can say when it
happened. A session id or ``"all"`` never reaches past that folder: a transcript holds whatever passed through
its session (a key pasted in project B must not reach a question asked in project A). The run itself is
`rlm_query`'s (the server hands in its ``answer``): same progress, same lean result. DIR may not exist yet
(Claude Code makes it at its first session): a call then says there are no transcripts yet.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from rlm_adapters.errors import RLMError
from rlm_adapters.files import LoadResult
from rlm_adapters.mcp_server.recall.current_session import current_session
from rlm_adapters.mcp_server.recall.transcripts import (
    MAX_TEXT_CHARS,
    Entry,
    as_context,
    check_session,
    project_folder,
    read_transcripts,
    since_filter,
)
from rlm_adapters.mcp_server.runs.arguments import strict_schema
from rlm_adapters.mcp_server.runs.results import RLMQueryOutput, refusal
from rlm_adapters.mcp_server.setup.config import ServerConfig

_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?")

Answer = Callable[[Context, str, LoadResult], Awaitable[CallToolResult]]

DESCRIPTION = (
    "Search this agent's own earlier conversation (Claude Code's session transcripts, kept on disk in full "
    "even after a compaction) and answer one precise question about it. Use after a compaction, when the user "
    "refers to something said or done earlier, or before redoing work that may already have been done. "
    "session: 'current' (this session), a session id, or 'all' (this project's sessions); since: an ISO time. "
    f"Each turn is read up to its first {MAX_TEXT_CHARS:,} characters (a longer one is cut, and marked so). "
    "Returns the answer with "
    "`sources` as session:line with the turn's time."
)
# Added to the server's instructions when the tool is served: what an agent reads before any tool description.
INSTRUCTIONS = (
    "rlm_recall answers a question about this agent's earlier turns from Claude Code's transcripts on disk, "
    "which keep what a compaction summarised away. Use it after a compaction, when the user refers to "
    "something said or done earlier, and before redoing work that may already be done; cite the session:line "
    "and time it returns."
)
QUERY_DESCRIPTION = "One precise question about the earlier conversation (e.g. 'which port did we choose for X')"
SESSION_DESCRIPTION = (
    "'current' (the calling session, as the plugin's hook recorded it), a session id, or 'all' (this project's)"
)
SINCE_DESCRIPTION = "Only turns at or after this ISO time or date, e.g. '2026-12-01T14:00' (UTC, as recorded)"


def sessions_for(config: ServerConfig, session: str) -> list[str] | None:
    """The session ids to read for `session` (None: all).

    Raises:
        ValueError, CacheError: the session is not one, or the current one is not known.
    """
    if session == "all":
        return None
    if session == "current":
        return [current_session([config.project, Path.cwd(), *config.roots])]
    return [check_session(session)]


def transcripts_folder(config: ServerConfig) -> Path:
    """The folder `rlm_recall` reads: the current project's under ``config.transcripts``, or all of it.

    Raises:
        ValueError: the project's folder cannot be told apart from others' (`transcripts.project_folder`).
    """
    projects = config.transcripts
    if projects is None:
        raise ValueError("rlm_recall needs config.transcripts (--transcripts DIR)")
    return projects if config.recall_projects == "all" else project_folder(projects, config.project)


def no_transcripts(folder: Path, config: ServerConfig | None = None) -> str:
    """The refusal when `folder` holds no transcript at all (Claude Code has not written one there yet)."""
    projects = config.transcripts if config is not None and config.transcripts is not None else folder
    if not projects.is_dir():
        return f"no Claude Code transcripts yet: {projects} does not exist (Claude Code writes each session there)"
    if config is not None and folder != projects:
        return (
            f"no Claude Code transcripts of this project ({config.project}) yet under {projects} (Claude Code "
            f"writes them in {folder.name}); rlm_recall reads only this project's (rlm-mcp --recall-projects all "
            "reads every project's)"
        )
    return f"no Claude Code transcripts yet under {folder} (Claude Code writes each session there)"


def _timed(location: str, times: dict[tuple[str, int], str]) -> str:
    """``session:N`` or ``session:N-M`` followed by the time (or first and last times) of those turns."""
    session, _, lines = location.rpartition(":")
    first, _, last = lines.partition("-")
    if not session or not first.isdigit() or not (last or first).isdigit():
        return location
    start, end = int(first), int(last or first)
    # Over the turns, not over the range: a span's size is never a loop's length.
    found = [t for (s, n), t in times.items() if s == session and start <= n <= end]
    if not found:
        return location
    span = found[0] if min(found) == max(found) else f"{min(found)} to {max(found)}"
    return f"{location} ({span})"


def with_times(result: CallToolResult, entries: Sequence[Entry]) -> CallToolResult:
    """`result` with each of its sources (``session:line``, in ``sources`` and in the text's ``Sources:``
    block) followed by the recorded time of that turn: what the agent cites ("at 14:02 you said ...")."""
    # Only a time that looks like one is named: the transcript's text must not write the Sources block.
    times = {(e.session, e.line): e.time for e in entries if _ISO_TIME.fullmatch(e.time)}
    structured = result.structured_content
    cited = structured.get("sources") if isinstance(structured, dict) else None
    if not isinstance(cited, list) or not cited:
        return result
    timed = {location: _timed(location, times) for location in cited if isinstance(location, str)}
    content = list(result.content)
    for index, block in enumerate(content):
        if isinstance(block, TextContent) and "\n\nSources:\n" in block.text:
            # The run's own block is the last one: an answer quoting "Sources:" is left as it is.
            head, mark, tail = block.text.rpartition("\n\nSources:\n")
            lines = tail.split("\n")
            for n, line in enumerate(lines):
                if not line.startswith("- "):
                    break
                lines[n] = "- " + timed.get(line[2:], line[2:])
            content[index] = block.model_copy(update={"text": head + mark + "\n".join(lines)})
    sources = [timed.get(location, location) if isinstance(location, str) else location for location in cited]
    return result.model_copy(update={"content": content, "structured_content": {**structured, "sources": sources}})


def recall_tool(config: ServerConfig, answer: Answer) -> Tool:
    """The ``rlm_recall`` tool over ``config.transcripts``; `answer` runs the RLM on the context it reads."""
    if config.transcripts is None:
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
            folder = transcripts_folder(config)
            if not folder.is_dir():
                raise ValueError(no_transcripts(folder, config))
            names = sessions_for(config, session)
            read = partial(read_transcripts, folder, names, max_bytes=config.max_bytes)
            entries, loaded = await anyio.to_thread.run_sync(read)
            if not loaded.files:
                raise ValueError(no_transcripts(folder, config))
            kept = since_filter(entries, since)
            if not kept:
                raise ValueError(f"no turns of session {session!r}" + (f" since {since!r}" if since else ""))
            context = as_context(kept, loaded)
        except (RLMError, ValueError) as exc:
            raise refusal(exc) from exc
        return with_times(await answer(ctx, query, context), kept)

    return strict_schema(
        Tool.from_function(
            rlm_recall,
            name="rlm_recall",
            title="Recall from this agent's session transcripts",
            description=DESCRIPTION,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True, idempotent_hint=False),
        )
    )


__all__ = [
    "DESCRIPTION",
    "INSTRUCTIONS",
    "no_transcripts",
    "recall_tool",
    "sessions_for",
    "transcripts_folder",
    "with_times",
]
