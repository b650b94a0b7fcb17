"""The Codex CLI and the Gemini CLI, pinned for `.ci/run` as the Inspector and Claude Code are.

Each runs with a fresh HOME and none of this environment's keys or RLM settings; they only read the
printed configuration (and Gemini CLI connects to the server): no model is called, nothing is fetched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CODEX = "@openai/codex@0.171.0"
GEMINI = "@google/gemini-cli@0.61.0"
needs_codex = pytest.mark.skipif(
    shutil.which("codex") is None, reason=f"the Codex CLI is not installed (npm install -g {CODEX})"
)
needs_gemini = pytest.mark.skipif(
    shutil.which("gemini") is None, reason=f"the Gemini CLI is not installed (npm install -g {GEMINI})"
)
_MODEL_PREFIXES = ("RLM_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_", "CODEX_", "CLAUDE")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without model keys or RLM settings, with `home` as HOME, and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_MODEL_PREFIXES)}
    env.update(HOME=str(home), NO_UPDATE_NOTIFIER="1", **extra)
    return env


def run(command: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a client's command in `cwd`; the caller checks the outcome."""
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
