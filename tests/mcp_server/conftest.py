"""Fixtures for the MCP server tests: a workspace under an allowed root, and configs pointing at the fake server."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.mcp_server import ServerConfig
from rlm_adapters.testing import FakeOpenAIServer

MakeConfig = Callable[..., ServerConfig]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The allowed root, with a small project in it; `tmp_path / "outside"` is outside it."""
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("The magic number is 4242.\n", encoding="utf-8")
    (root / "docs" / "b.md").write_text("Nothing to see here.\n", encoding="utf-8")
    (root / "notes.txt").write_text("plain notes\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the secret magic number is 9999\n", encoding="utf-8")
    return root


@pytest.fixture
def make_config(fake_server: FakeOpenAIServer, workspace: Path, tmp_path: Path) -> MakeConfig:
    """A `ServerConfig` factory: the fake server as root and sub model, the local sandbox, logs in tmp."""

    def make(**overrides: Any) -> ServerConfig:
        values: dict[str, Any] = {
            "roots": [workspace],
            "model": "root-model",
            "sub_model": "leaf-model",
            "base_url": fake_server.base_url,
            "api_key": "test-key",
            "sandbox": "local",
            "log_dir": tmp_path / "logs",
            "heartbeat": 30.0,
            "environ": {},
        }
        values.update(overrides)
        return ServerConfig(**values)

    return make


def server_env(fake_server: FakeOpenAIServer, log_dir: Path) -> dict[str, str]:
    """Environment for an `rlm-mcp` subprocess talking to the fake server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
    env.update(
        RLM_MODEL="root-model",
        RLM_SUB_MODEL="leaf-model",
        OPENAI_BASE_URL=fake_server.base_url,
        OPENAI_API_KEY="test-key",
        RLM_MCP_LOG_DIR=str(log_dir),
    )
    return env
