"""Issue 48 item 8, the MCP server's side: its default trajectory folder and the logs in it are private.

The default folder ``~/.cache/rlm-adapters/mcp-trajectories`` was made 0755 with 0644 files; a second user
grepped a pasted key out of one. The logger's own checks: tests/issues/test_48_private_trajectories.py.
"""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest
from mcp import Client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.setup.config import default_log_dir
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig

PASTED = "sk-proj-PASTED-INTO-THE-QUERY"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.usefixtures("open_umask")
async def test_the_mcp_servers_default_folder_and_its_logs_are_private(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = default_log_dir()
    assert folder == tmp_path / "cache" / "rlm-adapters" / "mcp-trajectories"
    fake_server.root = scripted_root(["FINAL(done)"])
    async with Client(build_server(make_config(log_dir=folder))) as client:
        result = await client.call_tool("rlm_query", {"query": f"use the key {PASTED}", "text": "abc"})
        assert result.structured_content is not None
    logs = list(folder.glob("rlm_*.jsonl"))
    assert len(logs) == 1 and PASTED in logs[0].read_text()  # the log holds what the attacker read
    assert _mode(folder) == 0o700 and _mode(logs[0]) == 0o600


@pytest.mark.usefixtures("open_umask")
async def test_a_default_folder_an_older_version_left_open_is_closed_at_start(
    make_config: MakeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = default_log_dir()
    folder.mkdir(parents=True, mode=0o755)
    old = folder / "rlm_20250101_000000_0123abcd.jsonl"
    old.write_text(json.dumps({"type": "header", "query": PASTED}) + "\n")
    old.chmod(0o644)
    build_server(make_config(log_dir=folder))
    assert _mode(folder) == 0o700  # the old 0644 files can no longer be reached by other users


def test_a_named_folder_keeps_its_mode_and_is_named_in_a_warning(
    make_config: MakeConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "team-logs"
    shared.mkdir()
    shared.chmod(0o750)
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.mcp_server"):
        build_server(make_config(log_dir=shared))
    assert _mode(shared) == 0o750
    assert str(shared) in caplog.text and "chmod 700" in caplog.text
