"""Real MCP clients from npm against the real server: the MCP Inspector's CLI and Claude Code.

Run when they are installed (``.ci/run`` installs both with ``npm install -g``, at the versions pinned below),
skipped with the package to install otherwise. Nothing here fetches from the npm registry at test time: the
Inspector is the pinned npm install of `tests.mcp_server.inspector`, never ``npx -y``.
Neither needs a model: the Inspector calls the tool against the local fake server, and Claude Code only
connects to the server (``claude mcp list``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.claude import claude, claude_env, needs_claude, trust_project
from tests.mcp_server.conftest import server_env
from tests.mcp_server.inspector import INSPECTOR, needs_inspector
from tests.mcp_server.test_http import start_http_server

SERVER = [sys.executable, "-m", "rlm_adapters.mcp_server"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(command: list[str], env: dict[str, str], cwd: Path) -> dict[str, object]:
    """Run an Inspector CLI command and parse the JSON it prints."""
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"{command} failed: {done.stderr[-2000:]}"
    parsed: dict[str, object] = json.loads(done.stdout)
    return parsed


@pytest.mark.npx
@needs_inspector
@pytest.mark.slow
def test_inspector_cli_over_stdio(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    env = server_env(fake_server, tmp_path / "logs")
    target = [*SERVER, "--root", str(workspace), "--sandbox", "local"]
    assert INSPECTOR is not None
    listed = run([*INSPECTOR, *target, "--method", "tools/list"], env, workspace)
    assert [tool["name"] for tool in listed["tools"]] == ["rlm_query"]  # type: ignore[attr-defined]
    called = run(
        [
            *INSPECTOR,
            *target,
            "--method",
            "tools/call",
            "--tool-name",
            "rlm_query",
            "--tool-arg",
            "query=What is the magic number?",
            "--tool-arg",
            'paths=["docs/a.md"]',
        ],
        env,
        workspace,
    )
    assert called["content"] == [{"type": "text", "text": "4242\n\nSources:\n- docs/a.md:1"}]
    assert called["structuredContent"]["sources"] == ["docs/a.md:1"]  # type: ignore[index]  # lean: path:line


@pytest.mark.npx
@needs_inspector
@pytest.mark.slow
def test_inspector_cli_over_http(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.root = scripted_root(["FINAL(over http)"])
    env = server_env(fake_server, tmp_path / "logs")
    process, url = start_http_server(workspace, env, "--sandbox", "local")
    assert INSPECTOR is not None
    try:
        listed = run([*INSPECTOR, url, "--transport", "http", "--method", "tools/list"], env, workspace)
        called = run(
            [
                *INSPECTOR,
                url,
                "--transport",
                "http",
                "--method",
                "tools/call",
                "--tool-name",
                "rlm_query",
                "--tool-arg",
                "query=q",
                "--tool-arg",
                "text=abc",
            ],
            env,
            workspace,
        )
    finally:
        process.terminate()
        process.wait(10)
        assert process.stderr is not None
        process.stderr.close()
    assert [tool["name"] for tool in listed["tools"]] == ["rlm_query"]  # type: ignore[attr-defined]
    assert called["content"] == [{"type": "text", "text": "over http"}]


@needs_claude
@pytest.mark.slow
def test_claude_code_registers_and_connects(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = claude_env(home, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    add = claude(["mcp", "add", "rlm", "--", *SERVER, "--root", "."], env, workspace, timeout=120)
    assert add.returncode == 0, add.stderr
    listed = claude(["mcp", "list"], env, workspace)
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith("rlm:"))
    assert "Connected" in line and "rlm_adapters.mcp_server" in line, listed.stdout


@pytest.mark.slow  # a real Claude Code (or server) start: 13-20 s on a busy 2-core machine
@needs_claude
@pytest.mark.skipif(
    shutil.which("rlm-mcp") is None, reason="the rlm-mcp console script is not installed (pip install -e .)"
)
def test_claude_code_connects_with_the_example_project_mcp_json(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(EXAMPLES / "claude_code.mcp.json", workspace / ".mcp.json")
    trust_project(home, workspace)  # project servers wait for the user's approval in an interactive session
    listed = claude(["mcp", "list"], claude_env(home, OPENAI_API_KEY="not-used"), workspace)
    assert listed.returncode == 0, listed.stderr
    assert "rlm: rlm-mcp --root . - ✔ Connected" in listed.stdout, listed.stdout


def plain_shell_env(home: Path) -> dict[str, str]:
    """A login-like environment whose PATH has Node and Claude Code but not this Python's scripts folder."""
    venv_bins = {str(Path(sys.executable).parent), str(Path(sys.executable).resolve().parent)}
    claude = shutil.which("claude")
    assert claude is not None
    folders = [str(Path(claude).parent), "/usr/local/bin", "/usr/bin", "/bin"]
    path = os.pathsep.join(dict.fromkeys(f for f in folders if f not in venv_bins))
    env = claude_env(home, PATH=path, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    env.pop("VIRTUAL_ENV", None)
    return env


def print_config(*args: str) -> str:
    done = subprocess.run([*SERVER, "--print-config", *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_claude
@pytest.mark.slow
def test_claude_code_connects_from_a_plain_shell_with_the_printed_command(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = plain_shell_env(home)
    if shutil.which("rlm-mcp", path=env["PATH"]) is not None:
        pytest.skip("rlm-mcp is installed system-wide here, so a plain shell cannot show the difference")
    # What the README used to say: the bare script name, found only while the venv is on PATH.
    bare = claude(["mcp", "add", "bare", "--", "rlm-mcp", "--root", "."], env, workspace, timeout=120)
    assert bare.returncode == 0, bare.stderr
    printed = print_config("claude", "--root", ".")
    absolute = next(line for line in printed.splitlines() if line.startswith("claude mcp add rlm "))
    assert "uvx --from" in printed and "pipx run --spec" in printed
    # Pasted into a plain shell, as a user would: the shell expands "$OPENAI_API_KEY".
    add = subprocess.run(
        ["bash", "-c", absolute],
        env={**env, "OPENAI_API_KEY": "sk-not-used"},
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert add.returncode == 0, add.stderr
    listed = claude(["mcp", "list"], env, workspace)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split(":", 1)[0]: line for line in listed.stdout.splitlines() if ":" in line}
    assert "Failed to connect" in lines["bare"], listed.stdout
    assert "Connected" in lines["rlm"] and "Failed" not in lines["rlm"], listed.stdout
    assert os.path.isabs(lines["rlm"].split(": ", 1)[1].split()[0]), lines["rlm"]


@needs_claude
@pytest.mark.slow
def test_claude_code_connects_from_a_plain_shell_with_the_printed_mcp_json(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = plain_shell_env(home)
    config = json.loads(print_config("json", "--root", "."))
    server = config["mcpServers"]["rlm"]
    assert os.path.isabs(server["command"]) and server["env"]["OPENAI_API_KEY"] == "${OPENAI_API_KEY}"
    (workspace / ".mcp.json").write_text(json.dumps(config))
    trust_project(home, workspace)
    listed = claude(["mcp", "list"], {**env, "OPENAI_API_KEY": "sk-not-used"}, workspace)
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in listed.stdout.splitlines() if line.startswith("rlm:"))
    assert "✔ Connected" in line, listed.stdout
