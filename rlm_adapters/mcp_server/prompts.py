"""MCP prompts for the common jobs, each producing a ready ``rlm_query`` call.

A client lists them with ``prompts/list`` (Claude Code shows them as ``/mcp__rlm__summarize-logs`` and so
on); getting one returns a user message that asks the agent to make exactly one ``rlm_query`` call, with
its arguments written out as JSON, and to cite the sources it returns.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

PROMPT_NAMES = ("summarize-logs", "find-in-repo", "compare-documents")


def rlm_call(arguments: dict[str, Any], purpose: str) -> str:
    """The message that asks for one ``rlm_query`` call with `arguments`."""
    return (
        f"{purpose} Call the `rlm_query` tool once with exactly these arguments:\n\n"
        f"```json\n{json.dumps(arguments, indent=2, ensure_ascii=False)}\n```\n\n"
        "Then answer from its result, citing the `path:line` sources it returns; if it skipped files or "
        "stopped early, say so."
    )


def split_paths(paths: str) -> list[str]:
    """Paths given as one prompt argument: separated by commas or new lines."""
    return [part.strip() for chunk in paths.splitlines() for part in chunk.split(",") if part.strip()]


def add_prompts(server: MCPServer) -> None:
    """Register the prompts on `server`."""

    @server.prompt(
        name="summarize-logs",
        title="Summarize logs",
        description="Summarize large log files: errors, their first and last times, counts and likely causes",
    )
    def summarize_logs(
        paths: Annotated[str, Field(description="Log files, folders or globs, comma-separated")] = "**/*.log",
        focus: Annotated[str, Field(description="What to look for (default: errors and warnings)")] = "",
    ) -> str:
        about = focus or "errors and warnings"
        query = (
            f"Summarize these logs with a focus on {about}: list each distinct problem with its count, first "
            "and last timestamp and the most likely cause, most frequent first."
        )
        return rlm_call({"query": query, "paths": split_paths(paths)}, "Summarize the logs.")

    @server.prompt(
        name="find-in-repo",
        title="Find in repository",
        description="Find where something is defined, used or decided across a whole repository",
    )
    def find_in_repo(
        what: Annotated[str, Field(description="What to find, e.g. 'where retries are configured'")],
        paths: Annotated[str, Field(description="Folders or globs to search, comma-separated")] = ".",
    ) -> str:
        query = (
            f"Find {what}. Name every place that matters with its file and line, and explain in one sentence "
            "each how it relates."
        )
        return rlm_call({"query": query, "paths": split_paths(paths)}, f"Search the repository for {what}.")

    @server.prompt(
        name="compare-documents",
        title="Compare documents",
        description="Compare long documents: what they agree on, where they differ, and what only one says",
    )
    def compare_documents(
        paths: Annotated[str, Field(description="The documents (files or globs), comma-separated")],
        aspect: Annotated[str, Field(description="What to compare (default: everything substantive)")] = "",
    ) -> str:
        about = f" with respect to {aspect}" if aspect else ""
        query = (
            f"Compare these documents{about}: what they agree on, where they contradict each other, and what "
            "only one of them says. Quote the passages that differ."
        )
        return rlm_call({"query": query, "paths": split_paths(paths)}, "Compare the documents.")
