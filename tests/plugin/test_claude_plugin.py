"""The Claude Code plugin at the repository root, with the pinned Claude Code: it validates, installs from the
local marketplace into a clean HOME, its MCP server really starts and completes the handshake, and in a real
``claude -p`` session its hook runs before a Read. No hosted model is called: the session's model is the
scripted `fake_messages_api` on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from tests.mcp_server.claude import claude, claude_env, needs_claude
from tests.plugin.fake_messages_api import ANSWER, messages_api

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / ".claude-plugin" / "plugin.json"
MARKETPLACE = ROOT / ".claude-plugin" / "marketplace.json"
SERVER_LINE = "plugin:rlm:rlm:"


def test_manifests_agree_with_each_other_and_the_package() -> None:
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    marketplace = json.loads(MARKETPLACE.read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert marketplace["name"] == "rlm-adapters"  # /plugin install rlm@rlm-adapters
    (entry,) = marketplace["plugins"]
    assert entry["name"] == manifest["name"] == "rlm" and entry["source"] == "./"
    assert manifest["version"] == project["version"]  # the launcher installs this very checkout
    servers = json.loads((ROOT / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert list(servers) == ["rlm"]
    assert servers["rlm"]["command"] == "${CLAUDE_PLUGIN_ROOT}/scripts/start-rlm-mcp.sh"
    assert os.access(ROOT / "scripts" / "start-rlm-mcp.sh", os.X_OK)
    # Off by default: the size over which the hook speaks is 0 until the user sets one.
    assert manifest["userConfig"]["read_hint_bytes"]["default"] == 0


def _front_matter(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{path} must start with YAML front matter"
    # Flat "key: value" lines, as Claude Code's skills and commands use them (no YAML library needed).
    pairs = [line.split(": ", 1) for line in text.split("---\n", 2)[1].splitlines() if line.strip()]
    assert all(len(pair) == 2 for pair in pairs), f"{path}: every front matter line is 'key: value'"
    return {key: value for key, value in pairs}


def test_skill_and_slash_command_name_the_plugins_tool_and_say_when() -> None:
    skill = _front_matter(ROOT / "skills" / "rlm-query" / "SKILL.md")
    assert skill["name"] == "rlm-query"
    assert "Use when" in skill["description"] and "whole repository" in skill["description"]
    command = _front_matter(ROOT / "commands" / "rlm.md")
    # Claude Code names a plugin's MCP tools mcp__plugin_<plugin>_<server>__<tool>; by hand the server is "rlm".
    assert "mcp__plugin_rlm_rlm__rlm_query" in command["allowed-tools"]
    assert "mcp__rlm__rlm_query" in command["allowed-tools"]
    assert "$ARGUMENTS" in (ROOT / "commands" / "rlm.md").read_text(encoding="utf-8")


@needs_claude
@pytest.mark.parametrize("target", [".", ".claude-plugin/plugin.json"], ids=["marketplace", "plugin"])
def test_claude_plugin_validate_passes_strictly(target: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = claude(["plugin", "validate", "--strict", target], claude_env(home), ROOT, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation passed" in done.stdout and "warning" not in done.stdout.lower(), done.stdout


def plain_env(home: Path, *, with_this_python: bool) -> dict[str, str]:
    """A login-like environment: Claude Code and the system on PATH; this virtualenv's scripts only if asked."""
    claude_bin = shutil.which("claude")
    assert claude_bin is not None
    folders = [str(Path(sys.executable).parent)] if with_this_python else []
    folders += [str(Path(claude_bin).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    env = claude_env(home, PATH=os.pathsep.join(dict.fromkeys(folders)), CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    env.pop("VIRTUAL_ENV", None)
    return env


def install(tmp_path: Path, *config: str) -> tuple[Path, Path]:
    """Add this repository as a marketplace in a clean HOME and install the plugin; returns (home, project)."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = plain_env(home, with_this_python=False)
    added = claude(["plugin", "marketplace", "add", str(ROOT)], env, project, timeout=120)
    assert added.returncode == 0, added.stdout + added.stderr
    flags = [arg for item in config for arg in ("--config", item)]
    installed = claude(["plugin", "install", "rlm@rlm-adapters", *flags], env, project, timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Successfully installed plugin: rlm@rlm-adapters" in installed.stdout, installed.stdout
    return home, project


def server_line(home: Path, project: Path, *, with_this_python: bool) -> str:
    listed = claude(["mcp", "list"], plain_env(home, with_this_python=with_this_python), project)
    assert listed.returncode == 0, listed.stderr
    return next(line for line in listed.stdout.splitlines() if line.startswith(SERVER_LINE))


@needs_claude
def test_installs_from_the_local_marketplace_and_connects_outside_any_virtualenv(tmp_path: Path) -> None:
    server = Path(sys.executable).parent / "rlm-mcp"
    if not server.is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    home, project = install(tmp_path, f"server_command={server}", "read_hint_bytes=1000000")
    details = claude(["plugin", "details", "rlm@rlm-adapters"], plain_env(home, with_this_python=False), project)
    assert details.returncode == 0, details.stderr
    inventory = {line.split("(")[0].strip(): line for line in details.stdout.splitlines() if "(" in line}
    assert "rlm-query" in inventory["Skills"] and "rlm" in inventory["Skills"]  # the skill and /rlm
    assert "PreToolUse" in inventory["Hooks"] and "rlm" in inventory["MCP servers"]
    # The project folder is the server's root, and the virtualenv is not on PATH: the setting finds it.
    line = server_line(home, project, with_this_python=False)
    assert "✔ Connected" in line and f"--root {project}" in line, line


@needs_claude
def test_connects_through_rlm_mcp_on_path_when_nothing_is_set(tmp_path: Path) -> None:
    if not (Path(sys.executable).parent / "rlm-mcp").is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    home, project = install(tmp_path)
    assert "✔ Connected" in server_line(home, project, with_this_python=True)


@needs_claude
def test_without_any_way_to_start_the_server_it_does_not_connect(tmp_path: Path) -> None:
    bare = plain_env(tmp_path, with_this_python=False)["PATH"]
    if any(shutil.which(tool, path=bare) for tool in ("rlm-mcp", "uvx", "pipx")):
        pytest.skip("rlm-mcp, uvx or pipx is installed system-wide here, so the plugin always finds a way")
    home, project = install(tmp_path)
    line = server_line(home, project, with_this_python=False)
    assert "Failed to connect" in line, line


def read_in_a_session(tmp_path: Path, *config: str) -> tuple[dict[str, object], str]:
    """A real ``claude -p`` session against `fake_messages_api` whose model reads a 5 KiB file of the project.

    Returns Claude Code's JSON result and everything it sent the model after the read.
    """
    server = Path(sys.executable).parent / "rlm-mcp"
    settings = [f"server_command={server}"] if server.is_file() else []
    home, project = install(tmp_path, *settings, *config)
    big = project / "big.log"
    big.write_text("MARKER-LINE 12345\n" * 300)
    with messages_api(str(big)) as (url, requests):
        env = plain_env(home, with_this_python=False)
        env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-not-used")
        done = claude(["-p", "Read big.log", "--output-format", "json"], env, project, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    after_read = [r for r in requests if "toolu_fake_read" in json.dumps(r)]
    assert after_read, "the session never sent the Read's result back to the model"
    return result, json.dumps(after_read[-1]["messages"])


@needs_claude
def test_in_a_claude_code_session_the_hook_suggests_rlm_query_and_the_read_goes_on(tmp_path: Path) -> None:
    result, sent = read_in_a_session(tmp_path, "read_hint_bytes=1000")
    assert result["result"] == ANSWER and result["permission_denials"] == []
    assert "MARKER-LINE 12345" in sent  # the file was read: the hook never blocks
    assert "PreToolUse:Read hook additional context" in sent, sent[-2000:]
    assert "over the 1000 bytes the user set" in sent and "mcp__plugin_rlm_rlm__rlm_query" in sent


@needs_claude
def test_in_a_claude_code_session_the_hook_is_silent_until_a_size_is_set(tmp_path: Path) -> None:
    result, sent = read_in_a_session(tmp_path)
    assert result["result"] == ANSWER and "MARKER-LINE 12345" in sent
    assert "rlm_query" not in sent.split("toolu_fake_read", 1)[1]
