"""Claude Code, pinned for `.ci/run` at `PACKAGE`: the environment its tests run it in and how they run it.

Claude Code only registers and connects to the server here (``claude mcp add`` / ``list``); no model is
called. Each run gets a fresh HOME and none of this environment's model keys or RLM settings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = "@anthropic-ai/claude-code@2.1.197"
needs_claude = pytest.mark.skipif(
    shutil.which("claude") is None, reason=f"Claude Code is not installed (npm install -g {PACKAGE})"
)


def claude_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without model keys or RLM settings, with `home` as HOME, no auto-update, and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_", "CLAUDE"))}
    env.update(HOME=str(home), DISABLE_AUTOUPDATER="1", **extra)
    return env


def claude(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``claude ARGS`` in `cwd`; the caller checks the outcome."""
    return subprocess.run(
        ["claude", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def trust_project(home: Path, workspace: Path) -> None:
    """Record what an interactive session asks the user first: `workspace` is trusted, its ``rlm`` server approved."""
    project = {"enabledMcpjsonServers": ["rlm"], "hasTrustDialogAccepted": True}
    (home / ".claude.json").write_text(json.dumps({"projects": {str(workspace.resolve()): project}}))
