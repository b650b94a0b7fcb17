"""``scripts/start-rlm-mcp.sh``: the plugin's server command picks the first way this machine has to start
rlm-mcp. Stand-ins on a bare PATH record how they were called, so every branch runs without a network."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "rlm"
LAUNCHER = PLUGIN / "scripts" / "start-rlm-mcp.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
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


def launch(
    bin_dir: Path, *, path: str | None = None, cwd: Path | None = None, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the launcher with a PATH of `bin_dir` (or `path`): it needs no other tool."""
    full = {"PATH": str(bin_dir) if path is None else path, "HOME": str(bin_dir.parent), **env}
    return subprocess.run(
        ["/bin/sh", str(LAUNCHER), *ARGS],
        env=full,
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def served(bin_dir: Path) -> list[str]:
    """What the launcher passes the server: rlm_recall over the HOME's Claude Code transcripts, then its args."""
    return [f"--transcripts={bin_dir.parent}/.claude/projects", *ARGS]


def called(folder: Path, name: str) -> tuple[list[str], dict[str, str]]:
    argv, environ = json.loads((folder / f"{name}.json").read_text())
    return argv, environ


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    (tmp_path / ".claude").mkdir()  # the HOME's Claude Code folder, as where the plugin is installed
    return path


def test_the_plugin_setting_names_the_server(bin_dir: Path, tmp_path: Path) -> None:
    chosen = stand_in(tmp_path / "elsewhere", "my-rlm-mcp")
    stand_in(bin_dir, "rlm-mcp")
    done = launch(bin_dir, RLM_PLUGIN_SERVER_COMMAND=str(chosen))
    assert done.returncode == 0, done.stderr
    argv, environ = called(tmp_path / "elsewhere", "my-rlm-mcp")
    assert argv == served(bin_dir) and "RLM_PLUGIN_SERVER_COMMAND" not in environ
    assert not (bin_dir / "rlm-mcp.json").exists()


def test_the_environment_variable_wins_over_the_setting(bin_dir: Path, tmp_path: Path) -> None:
    by_env = stand_in(tmp_path / "a", "by-env")
    by_setting = stand_in(tmp_path / "b", "by-setting")
    done = launch(bin_dir, RLM_MCP_COMMAND=str(by_env), RLM_PLUGIN_SERVER_COMMAND=str(by_setting))
    assert done.returncode == 0, done.stderr
    assert called(tmp_path / "a", "by-env")[0] == served(bin_dir) and not (tmp_path / "b" / "by-setting.json").exists()


def test_a_command_that_is_not_executable_is_one_line(bin_dir: Path, tmp_path: Path) -> None:
    done = launch(bin_dir, RLM_PLUGIN_SERVER_COMMAND=str(tmp_path / "no such rlm-mcp"))
    assert done.returncode == 127 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "is not an executable file" in done.stderr


def test_a_relative_command_is_refused(bin_dir: Path, tmp_path: Path) -> None:
    # Issue 35 (10b): "./rlm-mcp" would run a file of whatever folder the client starts the server in.
    project = tmp_path / "project"
    stand_in(project, "rlm-mcp")
    done = launch(bin_dir, cwd=project, RLM_PLUGIN_SERVER_COMMAND="./rlm-mcp")
    assert done.returncode == 127 and "is not an absolute path" in done.stderr
    assert not (project / "rlm-mcp.json").exists()


@pytest.mark.parametrize("path", [":{bin}", "{bin}::/nowhere", "{bin}:", ".:{bin}", "project:{bin}"])
def test_an_empty_or_relative_path_entry_runs_no_file_of_the_project(bin_dir: Path, tmp_path: Path, path: str) -> None:
    # Issue 35 (10b): an empty PATH entry is the current folder, where a cloned repository can plant rlm-mcp.
    project = tmp_path / "project"
    for name in ("rlm-mcp", "uvx", "pipx", "python3"):
        stand_in(project, name)
    stand_in(bin_dir, "rlm-mcp")
    done = launch(bin_dir, path=path.format(bin=bin_dir), cwd=tmp_path if path.startswith("project") else project)
    assert done.returncode == 0, done.stderr
    assert called(bin_dir, "rlm-mcp")[0] == served(bin_dir)
    assert not [name for name in ("rlm-mcp", "uvx", "pipx", "python3") if (project / f"{name}.json").exists()]
    _argv, environ = called(bin_dir, "rlm-mcp")
    # What the server starts sees no empty or relative entry either.
    assert environ["PATH"] == path.format(bin=bin_dir).replace("::", ":").strip(":").removeprefix(".:").removeprefix(
        "project:"
    )


def test_nothing_is_fetched_by_name_from_a_package_index(bin_dir: Path) -> None:
    # Issue 48: `uvx --from rlm-adapters[mcp]==0.1.0` ran whatever the index holds under a name not registered
    # by us; with uvx and pipx on PATH and no rlm-mcp, neither is run, and the reason names what to install.
    stand_in(bin_dir, "uvx")
    stand_in(bin_dir, "pipx")
    done = launch(bin_dir)
    assert done.returncode == 127
    assert not (bin_dir / "uvx.json").exists() and not (bin_dir / "pipx.json").exists()
    assert "no rlm-mcp on PATH" in done.stderr and "from a source you trust" in done.stderr


def test_recall_reads_the_claude_config_dir_when_one_is_set(bin_dir: Path, tmp_path: Path) -> None:
    # Issue 40: the plugin turns rlm_recall on over the folder Claude Code writes its transcripts in.
    stand_in(bin_dir, "rlm-mcp")
    config = tmp_path / "-my claude"  # a name like a flag stays the flag's value
    config.mkdir()
    assert launch(bin_dir, CLAUDE_CONFIG_DIR=str(config)).returncode == 0
    assert called(bin_dir, "rlm-mcp")[0] == [f"--transcripts={config}/projects", *ARGS]


def test_without_a_claude_folder_recall_stays_off_and_the_server_starts(bin_dir: Path, tmp_path: Path) -> None:
    stand_in(bin_dir, "rlm-mcp")
    assert launch(bin_dir, CLAUDE_CONFIG_DIR=str(tmp_path / "none")).returncode == 0
    assert called(bin_dir, "rlm-mcp")[0] == ARGS


def test_without_home_or_config_dir_recall_stays_off(bin_dir: Path) -> None:
    stand_in(bin_dir, "rlm-mcp")
    done = subprocess.run(
        ["/bin/sh", str(LAUNCHER), *ARGS], env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert called(bin_dir, "rlm-mcp")[0] == ARGS


def test_nothing_to_start_it_with_is_one_line_saying_what_to_install(bin_dir: Path) -> None:
    done = launch(bin_dir)  # no python3 either: nothing can serve the reason
    assert done.returncode == 127 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert all(word in done.stderr for word in ("pip install", "rlm-adapters[mcp]", "RLM_MCP_COMMAND"))


def _rpc(*messages: dict[str, object]) -> str:
    return "".join(json.dumps({"jsonrpc": "2.0", **m}) + "\n" for m in messages)


@pytest.mark.parametrize("setting", ["", "./rlm-mcp"])
def test_without_a_server_a_stand_in_answers_with_the_reason(bin_dir: Path, setting: str) -> None:
    python3 = shutil.which("python3")
    assert python3 is not None
    (bin_dir / "python3").symlink_to(python3)
    requests = _rpc(
        {"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}}},
        {"method": "notifications/initialized"},
        {"id": 2, "method": "tools/list"},
        {"id": 3, "method": "tools/call", "params": {"name": "rlm_query", "arguments": {"query": "q"}}},
    )
    done = launch(bin_dir, stdin=requests + "not json\n", RLM_PLUGIN_SERVER_COMMAND=setting)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3]
    reason = done.stderr.strip().removeprefix("rlm plugin: ")
    assert replies[0]["result"]["protocolVersion"] == "2025-06-18"
    assert replies[0]["result"]["instructions"] == f"rlm-mcp cannot start: {reason}"
    # tools/list fails with the reason: `claude mcp list` then flags the server instead of "✔ Connected".
    assert replies[1]["error"] == {"code": -32603, "message": f"rlm-mcp cannot start: {reason}"}
    call = replies[2]["result"]
    assert call["isError"] is True and call["content"] == [{"type": "text", "text": f"rlm-mcp cannot start: {reason}"}]
    fix = "absolute path of rlm-mcp" if setting else "pip install 'rlm-adapters[mcp]'"
    assert fix in reason


@pytest.mark.slow  # a real Claude Code (or server) start: 13-20 s on a busy 2-core machine
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
