"""``scripts/start-rlm-mcp.sh``: the plugin's server command picks the first way this machine has to start
rlm-mcp. Stand-ins on a bare PATH record how they were called, so every branch runs without a network."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "scripts" / "start-rlm-mcp.sh"
ARGS = ["--root", "/some/project dir", "--model", "m"]


def stand_in(folder: Path, name: str) -> Path:
    """An executable `name` that writes its argv and environment to ``<name>.json`` and exits 0."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(folder / (name + '.json'))!r}, 'w').write(json.dumps([sys.argv[1:], dict(os.environ)]))\n"
    )
    path.chmod(0o755)
    return path


def launch(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the launcher with a PATH of `bin_dir` and the one tool it needs (dirname)."""
    tools = bin_dir.parent / "tools"
    tools.mkdir(exist_ok=True)
    dirname = shutil.which("dirname")
    assert dirname is not None
    if not (tools / "dirname").exists():
        (tools / "dirname").symlink_to(dirname)
    full = {"PATH": f"{bin_dir}{os.pathsep}{tools}", "HOME": str(bin_dir.parent), **env}
    return subprocess.run(
        ["/bin/sh", str(LAUNCHER), *ARGS], env=full, capture_output=True, text=True, timeout=30, check=False
    )


def called(folder: Path, name: str) -> tuple[list[str], dict[str, str]]:
    argv, environ = json.loads((folder / f"{name}.json").read_text())
    return argv, environ


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def test_the_plugin_setting_names_the_server(bin_dir: Path, tmp_path: Path) -> None:
    chosen = stand_in(tmp_path / "elsewhere", "my-rlm-mcp")
    stand_in(bin_dir, "rlm-mcp")
    done = launch(bin_dir, RLM_PLUGIN_SERVER_COMMAND=str(chosen))
    assert done.returncode == 0, done.stderr
    argv, environ = called(tmp_path / "elsewhere", "my-rlm-mcp")
    assert argv == ARGS and "RLM_PLUGIN_SERVER_COMMAND" not in environ
    assert not (bin_dir / "rlm-mcp.json").exists()


def test_the_environment_variable_wins_over_the_setting(bin_dir: Path, tmp_path: Path) -> None:
    by_env = stand_in(tmp_path / "a", "by-env")
    by_setting = stand_in(tmp_path / "b", "by-setting")
    done = launch(bin_dir, RLM_MCP_COMMAND=str(by_env), RLM_PLUGIN_SERVER_COMMAND=str(by_setting))
    assert done.returncode == 0, done.stderr
    assert called(tmp_path / "a", "by-env")[0] == ARGS and not (tmp_path / "b" / "by-setting.json").exists()


def test_a_command_that_is_not_executable_is_one_line(bin_dir: Path, tmp_path: Path) -> None:
    done = launch(bin_dir, RLM_PLUGIN_SERVER_COMMAND=str(tmp_path / "no such rlm-mcp"))
    assert done.returncode == 127 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "is not an executable file" in done.stderr


def test_rlm_mcp_on_path_comes_before_uvx(bin_dir: Path) -> None:
    stand_in(bin_dir, "rlm-mcp")
    stand_in(bin_dir, "uvx")
    assert launch(bin_dir, RLM_PLUGIN_SERVER_COMMAND="").returncode == 0
    assert called(bin_dir, "rlm-mcp")[0] == ARGS and not (bin_dir / "uvx.json").exists()


def test_uvx_installs_the_plugins_own_copy(bin_dir: Path) -> None:
    stand_in(bin_dir, "uvx")
    stand_in(bin_dir, "pipx")
    assert launch(bin_dir).returncode == 0
    assert called(bin_dir, "uvx")[0] == ["--from", f"{ROOT}[mcp]", "rlm-mcp", *ARGS]


def test_pipx_when_there_is_no_uvx(bin_dir: Path) -> None:
    stand_in(bin_dir, "pipx")
    assert launch(bin_dir).returncode == 0
    assert called(bin_dir, "pipx")[0] == ["run", "--spec", f"{ROOT}[mcp]", "rlm-mcp", *ARGS]


def test_nothing_to_start_it_with_is_one_line_saying_what_to_install(bin_dir: Path) -> None:
    done = launch(bin_dir)
    assert done.returncode == 127 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert all(word in done.stderr for word in ("uv", "pipx", "rlm-adapters[mcp]", "RLM_MCP_COMMAND"))


def test_the_real_server_starts_through_it(tmp_path: Path) -> None:
    server = Path(sys.executable).parent / "rlm-mcp"
    if not server.is_file():
        pytest.skip("the rlm-mcp console script is not installed next to this Python (pip install -e .)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RLM_PLUGIN_SERVER_COMMAND": str(server)}
    done = subprocess.run(
        ["/bin/sh", str(LAUNCHER), "--help"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: rlm-mcp")
