"""The MCP server ``rlm-mcp``: one tool, ``rlm_query``, for Claude Code and every MCP client.

An agent hands over paths (files, folders, globs) and/or text; the server reads them under its allowed
roots, runs a Recursive Language Model over them with its own model keys, reports progress, and returns
the answer with usage, the files read and a trajectory id (readable as ``rlm://trajectories/{id}``).

Needs the ``mcp`` extra: ``pip install "rlm-adapters[mcp]"``.
"""

from __future__ import annotations

from rlm_adapters._extras import require

require("mcp", extra="mcp", feature="the MCP server (rlm-mcp)")

from rlm_adapters.mcp_server.runs.results import RLMQueryOutput  # noqa: E402
from rlm_adapters.mcp_server.server import build_server  # noqa: E402
from rlm_adapters.mcp_server.setup.config import ServerConfig, parse_config  # noqa: E402

__all__ = ["RLMQueryOutput", "ServerConfig", "build_server", "parse_config"]
