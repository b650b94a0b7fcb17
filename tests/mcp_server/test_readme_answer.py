"""docs/mcp.md's Claude Code answer is what the server really returns, and its `claude mcp add` recipes connect.

The plugin, its skill and its command are tested in `tests/plugin/`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from mcp import Client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.mcp_server.claude import claude, claude_env, needs_claude
from tests.mcp_server.conftest import MakeConfig

ROOT = Path(__file__).resolve().parents[2]


def _docs_answer() -> str:
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    block = page.split("<!-- mcp-answer:start -->\n", 1)[1].split("<!-- mcp-answer:end -->", 1)[0]
    return block.removeprefix("```text\n").removesuffix("```\n").rstrip("\n")


async def test_docs_show_the_answer_and_sources_the_server_returns(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path
) -> None:
    tree = planted.make_tree(workspace / "repo")
    fake_server.root = planted.root()
    async with Client(build_server(make_config(roots=[tree]))) as client:
        result = await client.call_tool("rlm_query", {"query": "What are the rollout passwords?", "paths": ["src"]})
    assert result.content[0].text == _docs_answer()  # type: ignore[union-attr]


def _claude(args: list[str], home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = claude_env(home, OPENAI_API_KEY="not-used", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    return claude(args, env, cwd)


@needs_claude
@pytest.mark.skipif(shutil.which("rlm-mcp") is None, reason="the rlm-mcp console script is not installed")
@pytest.mark.parametrize("scope", ["user", "project"])
@pytest.mark.slow
def test_docs_claude_mcp_add_with_absolute_paths_connects(workspace: Path, tmp_path: Path, scope: str) -> None:
    server = str(Path(shutil.which("rlm-mcp") or "").resolve())
    home = tmp_path / "home"
    home.mkdir()
    root = str(workspace.resolve())
    added = _claude(["mcp", "add", "--scope", scope, "rlm", "--", server, "--root", root], home, workspace)
    assert added.returncode == 0, added.stderr
    if scope == "project":
        written = json.loads((workspace / ".mcp.json").read_text(encoding="utf-8"))["mcpServers"]["rlm"]
        assert written["command"] == server and written["args"] == ["--root", root]
        # Project servers wait for the user's approval in an interactive session; record it as that would.
        config = json.loads((home / ".claude.json").read_text(encoding="utf-8"))
        config.setdefault("projects", {}).setdefault(root, {}).update(
            enabledMcpjsonServers=["rlm"], hasTrustDialogAccepted=True
        )
        (home / ".claude.json").write_text(json.dumps(config))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A user-scope server answers from any folder; a project one from its project.
    listed = _claude(["mcp", "list"], home, elsewhere if scope == "user" else workspace)
    assert listed.returncode == 0, listed.stderr
    assert f"rlm: {server} --root {root} - ✔ Connected" in listed.stdout, listed.stdout
