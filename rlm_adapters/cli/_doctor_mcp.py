"""`rlm doctor`'s check of the MCP server as the Claude Code plugin starts it: which ``rlm-mcp`` its launcher
(``plugins/rlm/scripts/start-rlm-mcp.sh``) would find from this ``PATH``, and the setting that points it at this
installation when it would find none.

The launcher's order is mirrored here (``RLM_MCP_COMMAND``, then ``rlm-mcp`` on ``PATH``; absolute ``PATH``
entries only; nothing is fetched by name from a package index). When it finds nothing its server is a stand-in
that says why: ``claude mcp list`` flags it (``! Connected · tools fetch failed``) and ``claude mcp get
plugin:rlm:rlm`` shows the reason.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

STAND_IN = "a stand-in that only says why (claude mcp get plugin:rlm:rlm shows it)"


def this_rlm_mcp(python: str = sys.executable) -> str | None:
    """The ``rlm-mcp`` console script of this installation, if there is one."""
    beside = Path(python).parent / "rlm-mcp"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("rlm-mcp")


def _on(path: str, tool: str) -> str | None:
    absolute = os.pathsep.join(entry for entry in path.split(os.pathsep) if entry.startswith("/"))
    return shutil.which(tool, path=absolute) if absolute else None


def plugin_server(environ: Mapping[str, str]) -> tuple[str, bool]:
    """What the plugin's launcher would start from `environ`, and whether that is a real server."""
    command = environ.get("RLM_MCP_COMMAND", "")
    if command:
        if not command.startswith("/"):
            return f"{STAND_IN}: RLM_MCP_COMMAND={command!r} is not an absolute path", False
        if not (os.path.isfile(command) and os.access(command, os.X_OK)):
            return f"{STAND_IN}: RLM_MCP_COMMAND={command!r} is not an executable file", False
        return f"{command} (RLM_MCP_COMMAND)", True
    path = environ.get("PATH", "")
    if found := _on(path, "rlm-mcp"):
        return f"{found} (on PATH)", True
    return f"{STAND_IN}: no rlm-mcp on PATH (the plugin fetches nothing from a package index)", False


def mcp_lines(environ: Mapping[str, str] | None = None, python: str = sys.executable) -> list[str]:
    """The doctor's lines on ``rlm-mcp``: this installation's, and what the Claude Code plugin would start."""
    environ = os.environ if environ is None else environ
    ours = this_rlm_mcp(python)
    extra = importlib.util.find_spec("mcp") is not None
    lines = [f"rlm-mcp     {ours or 'not installed'}" + ("" if extra else " (pip install 'rlm-adapters[mcp]')")]
    started, real = plugin_server(environ)
    lines.append(f"  plugin    from this PATH (and no rlm-mcp command setting) the Claude Code plugin starts {started}")
    if not real or not extra:
        fix = ours or "/absolute/path/to/rlm-mcp"
        lines.append(
            f"  {'':<9} point it at one: claude plugin install rlm@rlm-adapters --config server_command={fix}"
            f" (or RLM_MCP_COMMAND={fix} in the environment Claude Code starts from)"
        )
    return lines
