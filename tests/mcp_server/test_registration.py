"""`rlm-mcp --print-config`: registrations that start the server from any shell, and never print a secret."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

RLM_MCP = shutil.which("rlm-mcp")
pytestmark = pytest.mark.skipif(
    RLM_MCP is None, reason="the rlm-mcp console script is not installed (pip install -e .)"
)
ROOT = Path(__file__).resolve().parents[2]


def rlm_mcp(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    assert RLM_MCP is not None
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
    return subprocess.run(
        [RLM_MCP, *args], env={**clean, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def test_claude_lines_use_absolute_paths_and_key_references(tmp_path: Path) -> None:
    done = rlm_mcp("--print-config", "claude", "--root", str(tmp_path), RLM_MODEL="gpt-x", OPENAI_API_KEY="sk-secret")
    assert done.returncode == 0, done.stderr
    assert "sk-secret" not in done.stdout
    adds = [shlex.split(line) for line in done.stdout.splitlines() if line.startswith("claude mcp add")]
    assert len(adds) == 3
    for words in adds:
        assert words[:4] == ["claude", "mcp", "add", "rlm"]
        assert "RLM_MODEL=gpt-x" in words and "OPENAI_API_KEY=$OPENAI_API_KEY" in words
        assert words[-2:] == ["--root", str(tmp_path)]
    absolute, uvx, pipx = (words[words.index("--") + 1 :] for words in adds)
    assert os.path.isabs(absolute[0]) and os.access(absolute[0], os.X_OK)
    assert uvx[:2] == ["uvx", "--from"] and uvx[3] == "rlm-mcp"
    assert pipx[:3] == ["pipx", "run", "--spec"] and pipx[4] == "rlm-mcp"
    # From a source checkout the launchers install that checkout, not an unrelated release.
    assert uvx[2] == pipx[3] == f"rlm-adapters[mcp] @ {ROOT.as_uri()}"


@pytest.mark.slow
def test_json_is_a_valid_mcp_json_for_each_launcher() -> None:
    for launcher, command in (("path", None), ("uvx", "uvx"), ("pipx", "pipx")):
        done = rlm_mcp(
            "--print-config", "json", "--launcher", launcher, ANTHROPIC_API_KEY="sk-ant", RLM_BACKEND="anthropic"
        )
        assert done.returncode == 0, done.stderr
        server = json.loads(done.stdout)["mcpServers"]["rlm"]
        assert server["type"] == "stdio" and server["args"][-2:] == ["--root", "."]
        assert server["command"] == command if command else os.path.isabs(server["command"])
        assert server["env"] == {
            "RLM_MODEL": "gpt-5-mini",
            "RLM_BACKEND": "anthropic",
            "ANTHROPIC_API_KEY": "${ANTHROPIC_API_KEY}",
        }


@pytest.mark.slow
def test_without_a_model_the_stand_ins_are_said_to_be_stand_ins() -> None:
    done = rlm_mcp("--print-config", "claude")
    assert done.returncode == 0
    assert done.stdout.startswith("# RLM_MODEL is not set here")


@pytest.mark.slow
def test_a_bad_root_is_refused_before_anything_is_printed() -> None:
    done = rlm_mcp("--print-config", "json", "--root", "no-such-folder")
    assert done.returncode == 2 and done.stdout == ""
    assert "--root 'no-such-folder' is not a folder" in done.stderr


@pytest.mark.slow
def test_the_http_port_is_not_the_local_model_servers() -> None:
    done = rlm_mcp("--help")
    assert "default: $RLM_MCP_PORT or 8765" in " ".join(done.stdout.split())
