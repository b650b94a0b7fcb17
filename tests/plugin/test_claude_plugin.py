"""The Claude Code plugin in `plugins/rlm` (the marketplace at the repository root), with the pinned Claude Code:
it validates, installs from the local marketplace into a clean HOME (copying only the plugin's folder), its MCP
server really starts and completes the handshake (or a stand-in says why it cannot), and in a real ``claude -p``
session its hook runs before a Read and what the model receives of an ``rlm_query`` result is lean. No hosted
model is called: the session's model is the scripted `fake_messages_api` on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import TextContent

from rlm_adapters.mcp_server import ServerConfig, build_server
from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.mcp_server.claude import claude, claude_env, needs_claude
from tests.plugin.fake_messages_api import ANSWER, messages_api

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "rlm"
MANIFEST = PLUGIN / ".claude-plugin" / "plugin.json"
MARKETPLACE = ROOT / ".claude-plugin" / "marketplace.json"
SERVER_LINE = "plugin:rlm:rlm:"


def test_manifests_agree_with_each_other_and_the_package() -> None:
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    marketplace = json.loads(MARKETPLACE.read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert marketplace["name"] == "rlm-adapters"  # /plugin install rlm@rlm-adapters
    (entry,) = marketplace["plugins"]
    # Its own folder, as Claude Code's marketplaces lay plugins out: an install copies that, not the checkout.
    assert entry["name"] == manifest["name"] == "rlm" and entry["source"] == "./plugins/rlm"
    assert manifest["version"] == project["version"]  # the launcher installs rlm-adapters at this version
    launcher = PLUGIN / "scripts" / "start-rlm-mcp.sh"
    assert f"version={project['version']}  #" in launcher.read_text(encoding="utf-8")
    servers = json.loads((PLUGIN / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]
    assert list(servers) == ["rlm"]
    assert servers["rlm"]["command"] == "${CLAUDE_PLUGIN_ROOT}/scripts/start-rlm-mcp.sh"
    assert os.access(launcher, os.X_OK)
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
    skill = _front_matter(PLUGIN / "skills" / "rlm-query" / "SKILL.md")
    assert skill["name"] == "rlm-query"
    assert "Use when" in skill["description"] and "whole repository" in skill["description"]
    command = _front_matter(PLUGIN / "commands" / "rlm.md")
    # Claude Code names a plugin's MCP tools mcp__plugin_<plugin>_<server>__<tool>; by hand the server is "rlm".
    assert "mcp__plugin_rlm_rlm__rlm_query" in command["allowed-tools"]
    assert "mcp__rlm__rlm_query" in command["allowed-tools"]
    text = (PLUGIN / "commands" / "rlm.md").read_text(encoding="utf-8")
    assert "$ARGUMENTS" in text
    # Issue 40: `/rlm recall <question>` goes to rlm_recall, which the command may call.
    assert (
        "mcp__plugin_rlm_rlm__rlm_recall" in command["allowed-tools"]
        and "mcp__rlm__rlm_recall" in command["allowed-tools"]
    )
    assert "recall <question" in command["argument-hint"] and "`/rlm recall <question>`" in text
    assert "`rlm_recall` tool instead" in text


def test_the_recall_skill_and_command_say_when_and_how_to_cite() -> None:
    skill = _front_matter(PLUGIN / "skills" / "rlm-recall" / "SKILL.md")
    assert skill["name"] == "rlm-recall"
    assert all(when in skill["description"] for when in ("after a compaction", "refers to", "before redoing work"))
    command = _front_matter(PLUGIN / "commands" / "recall.md")
    assert command["allowed-tools"] == "mcp__plugin_rlm_rlm__rlm_recall, mcp__rlm__rlm_recall"
    for path in (PLUGIN / "skills" / "rlm-recall" / "SKILL.md", PLUGIN / "commands" / "recall.md"):
        assert "session:line (time)" in path.read_text(encoding="utf-8"), path


@needs_claude
@pytest.mark.parametrize("target", [".", "plugins/rlm"], ids=["marketplace", "plugin"])
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
@pytest.mark.slow
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
@pytest.mark.slow
def test_connects_through_rlm_mcp_on_path_when_nothing_is_set(tmp_path: Path) -> None:
    if not (Path(sys.executable).parent / "rlm-mcp").is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    home, project = install(tmp_path)
    assert "✔ Connected" in server_line(home, project, with_this_python=True)


TOOL = "mcp__plugin_rlm_rlm__rlm_query"


def tool_result_in_a_session(
    home: Path, project: Path, arguments: dict[str, object], **env: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real ``claude -p`` session whose model calls the plugin's rlm_query with `arguments`: Claude Code's JSON
    result and the ``tool_result`` block it sent the model."""
    with messages_api(call=(TOOL, arguments)) as (url, requests):
        session = plain_env(home, with_this_python=False)
        session.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-not-used", **env)
        args = ["-p", "Use rlm_query", "--output-format", "json", "--allowedTools", TOOL]
        done = claude(args, session, project, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    blocks = [
        block
        for request in requests
        for message in request.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict)
        and block.get("type") == "tool_result"
        and block.get("tool_use_id") == "toolu_fake_read"
    ]
    last = json.dumps(requests[-1].get("messages"))[-1000:] if requests else ""
    assert blocks, f"the session never sent rlm_query's result back to the model: {last}"
    return json.loads(done.stdout), blocks[-1]


def received_text(block: dict[str, Any]) -> str:
    """What the model got of a tool result: its text, however Claude Code shaped the block."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


@needs_claude
@pytest.mark.slow
def test_without_any_way_to_start_the_server_the_agent_is_told_why(tmp_path: Path) -> None:
    bare = plain_env(tmp_path, with_this_python=False)["PATH"]
    if shutil.which("rlm-mcp", path=bare):
        pytest.skip("rlm-mcp is installed system-wide here, so the plugin always finds it")
    if shutil.which("python3", path=bare) is None:
        pytest.skip("no python3 on the system PATH to run the stand-in that says why")
    home, project = install(tmp_path)
    # Issue 37: not a bare "Failed to connect", nor a "Connected" that hides the failure: flagged, and the
    # reason with its fix where Claude Code shows a server's issue.
    assert "! Connected · tools fetch failed" in server_line(home, project, with_this_python=False)
    got = claude(["mcp", "get", "plugin:rlm:rlm"], plain_env(home, with_this_python=False), project)
    [issue] = [line.strip() for line in got.stdout.splitlines() if line.strip().startswith("Issue:")]
    assert "rlm-mcp cannot start: no rlm-mcp on PATH" in issue
    assert "pip install 'rlm-adapters[mcp]'" in issue
    # ... and the agent's model is told why, in the session's MCP server instructions. They come in with the
    # turn after the server has connected (a -p session can start before it has), so the model reads a file
    # of the project, as it would look around, until they are there (three turns at most).
    (project / "notes.txt").write_text("a note\n", encoding="utf-8")
    turns: list[int] = []

    def look_around(body: dict[str, Any]) -> dict[str, Any]:
        if "# MCP Server Instructions" in json.dumps(body) or len(turns) == 3:
            return {"type": "text", "text": ANSWER}
        turns.append(1)
        read = {"file_path": str(project / "notes.txt")}
        return {"type": "tool_use", "id": f"toolu_look_{len(turns)}", "name": "Read", "input": read}

    with messages_api(call=("Read", {}), script=look_around) as (url, requests):
        session = plain_env(home, with_this_python=False)
        session.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-ant-not-used")
        args = ["-p", "Use rlm_query", "--output-format", "json", "--allowedTools", "Read"]
        done = claude(args, session, project, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    told = [r for r in requests if "# MCP Server Instructions" in json.dumps(r)]
    assert told, f"no request of {len(requests)} held the server's instructions"
    sent = json.dumps(told[0])
    assert "## plugin:rlm:rlm" in sent and "rlm-mcp cannot start: no rlm-mcp on PATH" in sent


@needs_claude
@pytest.mark.slow
def test_an_install_copies_only_the_plugin(tmp_path: Path) -> None:
    # Issue 37: the marketplace's source "./" copied the whole checkout (its 1.2 GB .venv) into the cache.
    home, project = install(tmp_path)
    details = claude(["plugin", "details", "rlm@rlm-adapters"], plain_env(home, with_this_python=False), project)
    assert details.returncode == 0, details.stderr
    plugins = home / ".claude" / "plugins"
    copied = [p for p in plugins.rglob("*") if p.is_file() and "marketplaces" not in p.relative_to(plugins).parts]
    size = sum(p.stat().st_size for p in copied)
    names = {p.name for p in copied}
    assert "pyproject.toml" not in names and not any(p.suffix == ".py" and "rlm_adapters" in p.parts for p in copied)
    assert size < 200_000, sorted(str(p) for p in copied)[:20]
    assert {"start-rlm-mcp.sh", "unavailable.py", "read_hint.py", "SKILL.md", "rlm.md", "plugin.json"} <= names


@needs_claude
@pytest.mark.slow
def test_in_a_claude_code_session_the_model_receives_a_lean_result(tmp_path: Path) -> None:
    server = Path(sys.executable).parent / "rlm-mcp"
    if not server.is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    home, project = install(tmp_path, f"server_command={server}")
    tree = planted.make_tree(project / "repo")
    with FakeOpenAIServer(root=planted.root(fabricated=True)) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "x", "RLM_MODEL": "root-model"}
        env |= {"RLM_SUB_MODEL": "leaf-model", "RLM_SANDBOX": "local", "RLM_MCP_LOG_DIR": str(tmp_path / "logs")}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        arguments: dict[str, object] = {
            "query": "What are the rollout passwords?",
            "paths": [str(tree.relative_to(project) / "src")],
        }
        _result, block = tool_result_in_a_session(home, project, arguments, **env)
        # The text block the same call gets from the same server, through the MCP SDK's client.
        block_text = asyncio.run(_text_block(project, model.base_url, arguments, tmp_path / "logs"))
    text = received_text(block)
    print(f"\nclaude -p: the model received {len(text)} characters; the text block has {len(block_text)}")
    assert planted.FABRICATED_TEXT in text, text
    # Issue 37: it received 4,581 characters of JSON for a 156-character answer.
    assert len(text) <= 2 * len(block_text) + 600, text
    assert '"claims"' not in text and '"files_read"' not in text


async def _text_block(project: Path, url: str, arguments: dict[str, object], logs: Path) -> str:
    config = ServerConfig(
        roots=[project], model="root-model", sub_model="leaf-model", base_url=url, api_key="x",
        sandbox="local", log_dir=logs, environ={},
    )  # fmt: skip
    async with Client(build_server(config)) as client:
        result = await client.call_tool("rlm_query", arguments)
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


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
@pytest.mark.slow
def test_in_a_claude_code_session_the_hook_suggests_rlm_query_and_the_read_goes_on(tmp_path: Path) -> None:
    result, sent = read_in_a_session(tmp_path, "read_hint_bytes=1000")
    assert result["result"] == ANSWER and result["permission_denials"] == []
    assert "MARKER-LINE 12345" in sent  # the file was read: the hook never blocks
    assert "PreToolUse:Read hook additional context" in sent, sent[-2000:]
    assert "over the 1000 bytes the user set" in sent and "mcp__plugin_rlm_rlm__rlm_query" in sent


@needs_claude
@pytest.mark.slow
def test_in_a_claude_code_session_the_hook_is_silent_until_a_size_is_set(tmp_path: Path) -> None:
    result, sent = read_in_a_session(tmp_path)
    assert result["result"] == ANSWER and "MARKER-LINE 12345" in sent
    assert "rlm_query" not in sent.split("toolu_fake_read", 1)[1]
