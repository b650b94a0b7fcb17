"""`rlm-mcp --print-config CLIENT`: each client's documented format, keys only as references, flags carried.

Each output is parsed with the parser its client uses (JSON, TOML) and checked for that client's shape;
the Codex and Gemini CLIs then read the printed files themselves (pinned npm installs, skipped without).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.mcp_server.setup.print_config import CLIENTS, LAUNCHERS, SECRETS, print_config, render_client
from tests.mcp_server.npm_clients import clean_env, needs_codex, needs_gemini, run

SERVER = [sys.executable, "-m", "rlm_adapters.mcp_server"]
ENV = {"RLM_MODEL": "gpt-x", "OPENAI_API_KEY": "sk-planted-openai"}
# Every key variable set, each to a value that must never be printed.
PLANTED = {name: f"planted-{name.lower()}-0123456789" for name in SECRETS}


def parse(client: str, text: str) -> dict[str, Any]:
    """The printed registration as its client reads it."""
    parsed: dict[str, Any] = tomllib.loads(text) if client == "codex" else json.loads(text)
    return parsed


def entry(client: str, document: dict[str, Any]) -> dict[str, Any]:
    """The ``rlm`` server's own table in `document`."""
    servers = {"vscode": "servers", "codex": "mcp_servers"}.get(client, "mcpServers")
    assert list(document[servers]) == ["rlm"], document
    server: dict[str, Any] = document[servers]["rlm"]
    return server


def render(client: str, *args: str, environ: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    printed = render_client(client, list(args), ENV if environ is None else environ, timeout=900.0, **kwargs)
    return parse(client, printed.text)


STRUCTURED = [c for c in CLIENTS if c != "claude"]


@pytest.mark.parametrize("client", STRUCTURED)
def test_each_client_gets_its_documented_shape(client: str, tmp_path: Path) -> None:
    document = render(client, "--root", str(tmp_path), "--model", "m1", "--max-cost", "0.5")
    server = entry(client, document)
    assert os.path.isabs(server["command"]) and os.access(server["command"], os.X_OK)
    assert server["args"] == ["--root", str(tmp_path), "--model", "m1", "--max-cost", "0.5"]
    allowed = {
        "json": {"type", "command", "args", "env"},
        "claude-desktop": {"command", "args", "env"},
        "cursor": {"type", "command", "args", "env"},
        "vscode": {"type", "command", "args", "env"},
        "codex": {"command", "args", "env", "env_vars", "startup_timeout_sec", "tool_timeout_sec"},
        "gemini": {"command", "args", "env", "timeout"},
    }[client]
    assert set(server) == allowed
    assert server.get("type", "stdio") == "stdio"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in server["env"].items())
    assert server["env"]["RLM_MODEL"] == "gpt-x"
    if client == "vscode":
        assert set(document) == {"inputs", "servers"}
    else:
        assert len(document) == 1


def test_key_references_follow_each_clients_syntax() -> None:
    assert entry("json", render("json"))["env"]["OPENAI_API_KEY"] == "${OPENAI_API_KEY}"
    assert entry("cursor", render("cursor"))["env"]["OPENAI_API_KEY"] == "${env:OPENAI_API_KEY}"
    assert entry("gemini", render("gemini"))["env"]["OPENAI_API_KEY"] == "${OPENAI_API_KEY}"
    codex = entry("codex", render("codex"))
    assert codex["env_vars"] == ["OPENAI_API_KEY"] and "OPENAI_API_KEY" not in codex["env"]
    # Claude Desktop expands nothing: no reference would work, so no key at all, and a note says why.
    desktop = render_client("claude-desktop", [], ENV, timeout=900.0)
    assert "OPENAI_API_KEY" not in entry("claude-desktop", json.loads(desktop.text))["env"]
    assert any("expands no ${VAR}" in note and '"OPENAI_API_KEY"' in note for note in desktop.notes)


def test_the_gemini_note_says_an_untrusted_folder_runs_user_servers_neither() -> None:
    # Issue 37: the note named only project servers; Gemini CLI suppresses ~/.gemini's too in an untrusted folder.
    [note] = render_client("gemini", [], ENV, timeout=900.0).notes
    assert "user servers from ~/.gemini included" in note and "trust the folder" in note


def test_vscode_asks_for_each_key_as_a_password_input() -> None:
    environ = {"RLM_MODEL": "m", "RLM_BACKEND": "anthropic", "ANTHROPIC_API_KEY": "x", "GEMINI_API_KEY": "y"}
    document = render("vscode", environ=environ)
    env = entry("vscode", document)["env"]
    inputs = {i["id"]: i for i in document["inputs"]}
    assert (
        env["ANTHROPIC_API_KEY"] == "${input:anthropic-api-key}" and env["GEMINI_API_KEY"] == "${input:gemini-api-key}"
    )
    assert set(inputs) == {"anthropic-api-key", "gemini-api-key"}
    assert all(i["type"] == "promptString" and i["password"] is True for i in inputs.values())
    assert env["RLM_BACKEND"] == "anthropic"


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_planted_key_never_appears(client: str, launcher: str, tmp_path: Path) -> None:
    environ = {"RLM_MODEL": "gpt-x", **PLANTED}
    printed = render_client(client, ["--root", str(tmp_path)], environ, launcher=launcher, timeout=900.0)  # type: ignore[arg-type]
    shown = printed.text + "\n".join(printed.notes)
    leaked = [name for name, value in PLANTED.items() if value in shown or value[8:] in shown]
    assert leaked == [], f"{client} printed the value of {leaked}"
    if client != "claude-desktop":
        for name in SECRETS:  # each key the environment holds is referenced, by name
            assert name in printed.text, (client, name)


@pytest.mark.slow
def test_the_command_line_never_prints_a_key_from_its_environment(tmp_path: Path) -> None:
    for client in CLIENTS:
        env = {**os.environ, "RLM_MODEL": "gpt-x", **PLANTED}
        done = subprocess.run(
            [*SERVER, "--print-config", client, "--root", str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert not [v for v in PLANTED.values() if v in done.stdout + done.stderr], client
        if client != "claude":
            parse(client, done.stdout)  # stdout is the file alone; the advice went to stderr


def test_paths_become_absolute_for_clients_that_start_the_server_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    logs = tmp_path / "logs"
    args = ("--root", ".", "--root=docs", "--log-dir", "logs", "--model", "docs")
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        expected_abs = ["--root", str(tmp_path), f"--root={tmp_path / 'docs'}", "--log-dir", str(logs)]
        for client in ("claude-desktop", "codex", "gemini"):
            assert entry(client, render(client, *args))["args"] == [*expected_abs, "--model", "docs"], client
        for client in ("cursor", "vscode"):  # project files: relative to the workspace, in the editor's variable
            assert entry(client, render(client, *args))["args"] == [
                "--root",
                "${workspaceFolder}",
                "--root=${workspaceFolder}/docs",
                "--log-dir",
                "${workspaceFolder}/logs",
                "--model",
                "docs",
            ], client
        assert entry("cursor", render("cursor", "--root", ".."))["args"] == ["--root", str(tmp_path.parent)]
        # Claude Code starts servers in the project: its forms keep the paths as given.
        assert entry("json", render("json", *args))["args"] == list(args)
    finally:
        os.chdir(cwd)


def test_codex_toml_round_trips_hostile_folder_names(tmp_path: Path) -> None:
    hostile = tmp_path / 'a "quoted" \\ back\tslash\nnew line \x7f é 🦜 ]] [x]'
    hostile.mkdir()
    for client in ("codex", "gemini", "vscode"):
        assert entry(client, render(client, "--root", str(hostile)))["args"] == ["--root", str(hostile)], client


def test_codex_and_gemini_timeouts_exceed_the_servers_own_ceiling() -> None:
    codex = entry("codex", render_client_parsed("codex", timeout=900.0))
    assert codex["tool_timeout_sec"] > 900 and codex["startup_timeout_sec"] >= 30
    gemini = entry("gemini", render_client_parsed("gemini", timeout=900.0))
    assert gemini["timeout"] > 900_000  # milliseconds


def render_client_parsed(client: str, timeout: float) -> dict[str, Any]:
    return parse(client, render_client(client, [], ENV, timeout=timeout).text)


def test_the_timeout_flag_reaches_the_clients_timeouts() -> None:
    done = subprocess.run(
        [*SERVER, "--print-config", "codex", "--timeout", "3000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    server = entry("codex", tomllib.loads(done.stdout))
    assert server["tool_timeout_sec"] > 3000 and server["args"][-2:] == ["--timeout", "3000"]


@pytest.mark.parametrize("client", STRUCTURED)
def test_uvx_and_pipx_launchers_for_every_client(client: str) -> None:
    assert entry(client, render(client, launcher="uvx"))["command"] == "uvx"
    server = entry(client, render(client, launcher="pipx"))
    assert server["command"] == "pipx" and server["args"][:2] == ["run", "--spec"]
    assert server["args"][3] == "rlm-mcp"


def test_an_unknown_client_is_one_line_naming_the_valid_ones() -> None:
    done = subprocess.run([*SERVER, "--print-config", "emacs"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "'emacs' is not a client" in done.stderr and ", ".join(CLIENTS) in done.stderr


def test_notes_go_to_stderr_and_the_file_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert print_config("gemini", ["--root", "."], {}, timeout=900.0) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["mcpServers"]["rlm"]["env"]["RLM_MODEL"] == "gpt-5-mini"
    assert err.startswith("# RLM_MODEL is not set here") and "settings.json" in err


@needs_codex
def test_codex_lists_the_printed_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    printed = render_client("codex", ["--root", str(tmp_path)], ENV, timeout=900.0).text
    (home / ".codex" / "config.toml").write_text(printed, encoding="utf-8")
    listed = run(["codex", "mcp", "list", "--json"], clean_env(home), tmp_path)
    assert listed.returncode == 0, listed.stderr
    (server,) = json.loads(listed.stdout)
    assert server["name"] == "rlm" and server["enabled"] is True
    transport = server["transport"]
    assert transport["type"] == "stdio" and transport["command"] == entry("codex", tomllib.loads(printed))["command"]
    assert transport["args"] == ["--root", str(tmp_path)]
    assert transport["env"] == {"RLM_MODEL": "gpt-x"} and transport["env_vars"] == ["OPENAI_API_KEY"]
    assert server["tool_timeout_sec"] == 960


def _gemini_home(tmp_path: Path, settings: dict[str, Any]) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    (home / ".gemini").mkdir(parents=True)
    project.mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    # What Gemini CLI asks interactively first: this folder is trusted (else it runs no MCP server).
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(project): "TRUST_FOLDER"}))
    return home, project


@needs_gemini
@pytest.mark.slow
def test_gemini_connects_to_the_printed_server_and_expands_the_key_reference(tmp_path: Path) -> None:
    printed = json.loads(render_client("gemini", ["--root", str(tmp_path)], ENV, timeout=900.0).text)
    server = entry("gemini", printed)
    # Between Gemini CLI and the printed command: a wrapper that records the environment the server gets.
    seen = tmp_path / "env.json"
    wrapper = tmp_path / "record-env"
    wrapper.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "os.execv(sys.argv[1], sys.argv[1:])\n"
    )
    wrapper.chmod(0o755)
    server["args"] = [server["command"], *server["args"]]
    server["command"] = str(wrapper)
    home, project = _gemini_home(tmp_path, printed)
    listed = run(["gemini", "mcp", "list"], clean_env(home, OPENAI_API_KEY="sk-from-the-shell"), project)
    assert listed.returncode == 0, listed.stderr
    line = next(line for line in (listed.stdout + listed.stderr).splitlines() if "rlm:" in line)
    assert "Connected" in line and "Disconnected" not in line, listed.stdout + listed.stderr
    received = json.loads(seen.read_text())
    assert received["OPENAI_API_KEY"] == "sk-from-the-shell" and received["RLM_MODEL"] == "gpt-x"


@needs_gemini
@pytest.mark.slow
def test_gemini_shows_a_server_that_cannot_start_as_disconnected(tmp_path: Path) -> None:
    # The check above can fail: a command that is not there is not "Connected".
    printed = json.loads(render_client("gemini", [], ENV, timeout=900.0).text)
    entry("gemini", printed)["command"] = str(tmp_path / "no-such-rlm-mcp")
    home, project = _gemini_home(tmp_path, printed)
    listed = run(["gemini", "mcp", "list"], clean_env(home), project)
    line = next(line for line in (listed.stdout + listed.stderr).splitlines() if "rlm:" in line)
    assert "Disconnected" in line, line


@pytest.mark.parametrize("flags", [["--http"], ["--token", "s3cret-token"], ["--port=9000"], ["--host", "0.0.0.0"]])
def test_http_flags_are_refused_and_a_token_is_never_printed(flags: list[str]) -> None:
    done = subprocess.run(
        [*SERVER, "--print-config", "cursor", *flags], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"drop {flags[0].split('=')[0]}" in done.stderr
    assert "s3cret-token" not in done.stderr


@pytest.mark.slow
def test_a_path_that_is_not_utf8_is_one_line_not_a_crash(tmp_path: Path) -> None:
    odd = os.fsdecode(bytes(tmp_path) + b"/x\xff")
    os.mkdir(odd)
    for client in CLIENTS:
        done = subprocess.run(
            [*SERVER, "--print-config", client, "--root", odd], capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 2 and done.stdout == b"", client
        assert done.stderr.count(b"\n") == 1 and b"is not valid UTF-8" in done.stderr, done.stderr


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OPENAI_BASE_URL", "https://u:PASS-0xSECRET@llm.example/v1"),
        ("OPENAI_BASE_URL", "https://llm.example/v1?api-key=PASS-0xSECRET"),
        ("AZURE_OPENAI_ENDPOINT", "https://res.openai.azure.com/?sig=PASS-0xSECRET"),
    ],
)
def test_credentials_inside_an_endpoint_are_printed_as_a_reference(client: str, variable: str, value: str) -> None:
    """Issue 35, item 9: a password or a query key in an endpoint was printed, in all 7 formats."""
    environ = {"RLM_MODEL": "gpt-5-mini", variable: value}
    printed = render_client(client, [], environ, timeout=600)
    text = "\n".join([printed.text, *printed.notes])
    assert "PASS-0xSECRET" not in text
    assert variable in text  # still registered (or asked for, by Claude Desktop), by name
    plain = render_client(client, [], {"RLM_MODEL": "gpt-5-mini", variable: "https://llm.example/v1"}, timeout=600)
    assert "https://llm.example/v1" in plain.text  # an endpoint without credentials keeps its value


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    "args",
    [
        ["--store", "postgresql://rlm:s3cret-planted@db.internal/rlm"],
        ["--store=postgresql://rlm:s3cret-planted@db.internal/rlm"],
        ["--store", "postgresql://rlm@db.internal/rlm?password=s3cret-planted"],
    ],
)
def test_a_store_password_in_a_flag_is_refused_not_registered(client: str, args: list[str]) -> None:
    with pytest.raises(ValueError, match="holds a password") as refused:
        render_client(client, args, {"RLM_MODEL": "gpt-x"}, timeout=900.0)
    message = str(refused.value)
    assert "s3cret-planted" not in message
    assert "db.internal" in message and "PGPASSWORD" in message


@pytest.mark.parametrize("client", CLIENTS)
def test_a_store_is_registered_with_its_password_as_a_reference(client: str) -> None:
    """``RLM_STORE`` travels like the other settings; with a user in it, as a reference (it may hold a password),
    and ``PGPASSWORD`` only when a store is named."""
    plain = {"RLM_MODEL": "gpt-x", "PGPASSWORD": "pg-planted-secret"}
    shown = render_client(client, ["--store", "postgresql://db.internal/rlm"], plain, timeout=900.0).text
    assert "pg-planted-secret" not in shown
    if client != "claude-desktop":
        assert "PGPASSWORD" in shown
    assert "PGPASSWORD" not in render_client(client, [], plain, timeout=900.0).text
    with_store = {**plain, "RLM_STORE": "postgresql://rlm@db.internal/rlm"}
    printed = render_client(client, [], with_store, timeout=900.0)
    assert "pg-planted-secret" not in printed.text + "\n".join(printed.notes)
    # Claude Desktop expands no references: its keys are named in the notes, to be filled in by hand.
    shown = "\n".join(printed.notes) if client == "claude-desktop" else printed.text
    assert "RLM_STORE" in shown and "PGPASSWORD" in shown
