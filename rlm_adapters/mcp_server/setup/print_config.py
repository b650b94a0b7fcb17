"""``rlm-mcp --print-config CLIENT``: this server's registration in each MCP client's own format.

| client | where it goes | key references |
|---|---|---|
| ``claude`` | ``claude mcp add`` lines (shell) | ``"$OPENAI_API_KEY"``, expanded by the shell |
| ``json`` | a Claude Code project ``.mcp.json`` | ``${OPENAI_API_KEY}`` |
| ``claude-desktop`` | ``claude_desktop_config.json`` ``mcpServers`` | none: the app expands none (a note says so) |
| ``cursor`` | ``.cursor/mcp.json`` ``mcpServers`` | ``${env:OPENAI_API_KEY}`` |
| ``vscode`` | ``.vscode/mcp.json`` ``servers`` + ``inputs`` | ``${input:openai-api-key}``, a ``password`` input |
| ``codex`` | ``~/.codex/config.toml`` ``[mcp_servers.rlm]`` | ``env_vars = ["OPENAI_API_KEY"]``, forwarded by name |
| ``gemini`` | Gemini CLI ``settings.json`` ``mcpServers`` | ``${OPENAI_API_KEY}`` |

A key's value is never printed, whatever the environment holds. Settings (``RLM_MODEL``, ...) are copied
with their values. The file goes to stdout and the advice about it to stderr, so ``> file`` writes a clean
file. Clients that start servers outside the project get absolute ``--root`` / ``--log-dir`` paths; the
editors' project files get ``${workspaceFolder}``-relative ones.

How the server is launched does not depend on ``PATH``: this installation's absolute path, or a ``uvx`` /
``pipx run`` launcher that installs the package into a cached environment of its own (``claude mcp add rlm --
rlm-mcp`` works only while the virtualenv that installed ``rlm-mcp`` is on the ``PATH`` of the shell that
starts Claude Code). Secrets are never printed: key variables appear as references.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TextIO
from urllib.parse import unquote, urlparse

import rlm_adapters
from rlm_adapters.core.cache import shown_url
from rlm_adapters.flags import option_variables

__all__ = ["CLIENTS", "LAUNCHERS", "Printed", "print_config", "render_client"]


# -- the launch command and the environment (every client) ----------------------------------------
Launcher = Literal["path", "uvx", "pipx"]
LAUNCHERS: tuple[Launcher, ...] = ("path", "uvx", "pipx")
FORMATS = ("claude", "json")
# Settings copied into the registration with their values, and key variables copied only as references.
SETTINGS = (
    "RLM_MODEL",
    "RLM_SUB_MODEL",
    "RLM_BACKEND",
    "OPENAI_BASE_URL",
    "RLM_STORE",  # a URL with a user or password in it is registered as a reference, as a key is
    *option_variables(),  # each option's, as rlm-mcp reads them: RLM_SANDBOX, RLM_MAX_COST, RLM_RUN_TIMEOUT, ...
    "AWS_REGION",
    "AZURE_OPENAI_ENDPOINT",
    "OPENAI_API_VERSION",
)
# Every backend's credentials (model_flags.credentials_problem): a client that forwards no variable of its
# own environment (Codex, Gemini CLI, Claude Desktop) must be told each one the server needs.
SECRETS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENROUTER_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "PORTKEY_API_KEY",
    "AI_GATEWAY_API_KEY",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)
# libpq's password for a store URL without one: a key like the others, registered only when a store is named.
STORE_SECRETS = ("PGPASSWORD",)
EXAMPLE_MODEL = "gpt-5-mini"


def server_command() -> list[str]:
    """This installation's server as an absolute command: the ``rlm-mcp`` script next to this Python,
    else this Python with ``-m rlm_adapters.mcp_server``."""
    python = Path(sys.executable).absolute()
    script = python.parent / "rlm-mcp"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-m", "rlm_adapters.mcp_server"]


def package_spec() -> str:
    """What ``uvx --from`` / ``pipx run --spec`` should install: this source checkout when the package
    runs from one (an editable or local install), else the released version from PyPI."""
    checkout = Path(rlm_adapters.__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return f"rlm-adapters[mcp] @ {checkout.as_uri()}"
    try:
        distribution = importlib.metadata.distribution("rlm-adapters")
    except importlib.metadata.PackageNotFoundError:
        return "rlm-adapters[mcp]"
    direct = json.loads(distribution.read_text("direct_url.json") or "{}")
    url = str(direct.get("url", ""))
    if url.startswith("file://"):
        return f"rlm-adapters[mcp] @ {Path(unquote(urlparse(url).path)).as_uri()}"
    return f"rlm-adapters[mcp]=={distribution.version}"


def launch_command(launcher: Launcher) -> list[str]:
    """The command that starts the server with `launcher`."""
    if launcher == "uvx":
        return ["uvx", "--from", package_spec(), "rlm-mcp"]
    if launcher == "pipx":
        return ["pipx", "run", "--spec", package_spec(), "rlm-mcp"]
    return server_command()


def env_parts(environ: Mapping[str, str], server_args: Sequence[str] = ()) -> tuple[dict[str, str], list[str]]:
    """The settings to register with their values, and the key variables to register as references.

    With no model configured, the README's example model and OpenAI key stand in, to be edited. With a store
    (``--store`` in `server_args`, or ``RLM_STORE``), ``PGPASSWORD`` is a key too.
    """
    settings = {name: environ[name] for name in SETTINGS if environ.get(name)}
    store_named = bool(environ.get("RLM_STORE")) or any(arg.split("=", 1)[0] == "--store" for arg in server_args)
    secrets = [name for name in (*SECRETS, *(STORE_SECRETS if store_named else ())) if environ.get(name)]
    # An endpoint with credentials in it (https://user:PASS@host, ?api-key=...) is a key too: registered
    # as a reference, never printed into a file users commit.
    carrying = [name for name, value in settings.items() if _holds_credentials(value)]
    settings = {name: value for name, value in settings.items() if name not in carrying}
    secrets += carrying
    if "RLM_MODEL" not in settings:
        settings = {"RLM_MODEL": EXAMPLE_MODEL, **settings}
    if not secrets and "OPENAI_BASE_URL" not in settings:
        secrets = ["OPENAI_API_KEY"]
    return settings, secrets


def _holds_credentials(value: str) -> bool:
    """Whether a setting's value is a URL with a user, a password, a query or a fragment (any may be a key)."""
    if "://" not in value:
        return False
    try:
        url = urlparse(value.strip())
    except ValueError:
        return True  # not a URL we can read: not printed either
    return bool(url.username or url.password or url.query or url.fragment or "@" in url.netloc)


def server_env(environ: Mapping[str, str], reference: str, server_args: Sequence[str] = ()) -> dict[str, str]:
    """The variables to register: settings with their values, keys as `reference` (``"${name}"``-style)."""
    settings, secrets = env_parts(environ, server_args)
    return {**settings, **{name: reference.format(name=name) for name in secrets}}


def claude_add(name: str, command: Sequence[str], env: Mapping[str, str]) -> str:
    """One ``claude mcp add`` line, quoted for a POSIX shell (key references stay expandable)."""
    flags = []
    for key, value in env.items():
        quoted = f'"{value}"' if value == f"${key}" else shlex.quote(value)
        flags.append(f"--env {key}={quoted}")
    return shlex.join(["claude", "mcp", "add", name]) + "".join(f" {f}" for f in flags) + " -- " + shlex.join(command)


def mcp_json(name: str, command: Sequence[str], env: Mapping[str, str]) -> str:
    """A project ``.mcp.json`` (Claude Code, and the same fields for other stdio clients)."""
    server = {"type": "stdio", "command": command[0], "args": list(command[1:]), "env": dict(env)}
    return json.dumps({"mcpServers": {name: server}}, indent=2)


def render(
    kind: str, server_args: Sequence[str], environ: Mapping[str, str], *, launcher: Launcher = "path", name: str = "rlm"
) -> str:
    """The registration text `rlm-mcp --print-config KIND` prints.

    Args:
        kind: ``claude`` (``claude mcp add`` lines for every launcher) or ``json`` (``.mcp.json``).
        server_args: The server's own flags to register (``--root`` and the like).
        environ: Where the model settings are read from.
        launcher: For ``json``: the absolute path (default), ``uvx`` or ``pipx``.
        name: The server's name in the client.
    """
    if kind == "json":
        return mcp_json(
            name, [*launch_command(launcher), *server_args], server_env(environ, "${{{name}}}", server_args)
        )
    if kind != "claude":
        raise ValueError(f"unknown --print-config {kind!r}; use one of {list(FORMATS)}")
    env = server_env(environ, "${name}", server_args)
    lines = [
        "# This installation, by absolute path: works from any shell, no virtualenv on PATH needed.",
        claude_add(name, [*launch_command("path"), *server_args], env),
        "# Or let uv / pipx keep the package in a cached environment of its own (either one; needs uv or pipx):",
        claude_add(name, [*launch_command("uvx"), *server_args], env),
        claude_add(name, [*launch_command("pipx"), *server_args], env),
        "# Then check it: claude mcp list   (rlm: ... - ✔ Connected)",
    ]
    if not environ.get("RLM_MODEL"):
        lines.insert(0, f"# RLM_MODEL is not set here: {EXAMPLE_MODEL} and OPENAI_API_KEY stand in; edit them.")
    return "\n".join(lines)


# -- each client's format ----------------------------------------------------------------------
CLIENTS = ("claude", "claude-desktop", "cursor", "vscode", "codex", "gemini", "json")
# Flags whose value is a path: made absolute (or workspace-relative) for clients that start us elsewhere.
PATH_FLAGS = ("--root", "--log-dir")
HTTP_FLAGS = ("--http", "--host", "--port", "--token", "--token-file")
# Over the server's own per-call ceiling, so the client's timeout never cuts a run the server would finish.
TIMEOUT_MARGIN = 60.0
STARTUP_TIMEOUT = 60  # seconds: a uvx / pipx launcher's first start installs the package
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Printed:
    """What ``--print-config`` prints: `text` to stdout, `notes` (advice, one line each) to stderr."""

    text: str
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Server:
    """The pieces every format is made of."""

    command: list[str]
    secrets: list[str]  # key variables, to be passed as references only
    settings: dict[str, str]  # other variables, with their values
    timeout: float  # the server's per-call ceiling, seconds


def _rewrite_paths(args: Sequence[str], convert: Callable[[str], str]) -> list[str]:
    """`args` with each `PATH_FLAGS` value passed through `convert` (``--root X`` and ``--root=X``)."""
    out: list[str] = []
    pending = False
    for arg in args:
        if pending:
            out.append(convert(arg))
            pending = False
        elif arg in PATH_FLAGS:
            out.append(arg)
            pending = True
        elif arg.startswith(tuple(f"{flag}=" for flag in PATH_FLAGS)):
            flag, value = arg.split("=", 1)
            out.append(f"{flag}={convert(value)}")
        else:
            out.append(arg)
    return out


def _absolute(value: str) -> str:
    return str(Path(value).expanduser().resolve())


def _workspace_relative(value: str) -> str:
    """``${workspaceFolder}``-based for a relative path (Cursor's and VS Code's variable), else as given."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    relative = os.path.normpath(value)
    if relative == ".":
        return "${workspaceFolder}"
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return _absolute(value)  # outside the workspace: this machine's path
    return "${workspaceFolder}/" + Path(relative).as_posix()


def _stand_in_notes(environ: Mapping[str, str]) -> list[str]:
    if environ.get("RLM_MODEL"):
        return []
    return [f"RLM_MODEL is not set here: {EXAMPLE_MODEL} and OPENAI_API_KEY stand in; edit them."]


def _json(document: object) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False)


def _desktop(server: _Server, name: str) -> Printed:
    entry = {"command": server.command[0], "args": server.command[1:], "env": server.settings}
    notes = [
        "Merge into claude_desktop_config.json (Claude Desktop: Settings > Developer > Edit Config), then restart it."
    ]
    if server.secrets:
        wanted = ", ".join(f'"{s}": "..."' for s in server.secrets)
        notes.append(
            "Claude Desktop expands no ${VAR} and does not see your shell's variables, so no key is printed: "
            f"add {wanted} to env yourself, in that file only."
        )
    return Printed(_json({"mcpServers": {name: entry}}), notes)


def _cursor(server: _Server, name: str) -> Printed:
    env = {**server.settings, **{s: f"${{env:{s}}}" for s in server.secrets}}
    entry = {"type": "stdio", "command": server.command[0], "args": server.command[1:], "env": env}
    notes = [
        "Write to .cursor/mcp.json in the project (or ~/.cursor/mcp.json); ${env:NAME} is read from the "
        "environment Cursor was started in."
    ]
    return Printed(_json({"mcpServers": {name: entry}}), notes)


def _input_id(variable: str) -> str:
    return variable.lower().replace("_", "-")


def _vscode(server: _Server, name: str) -> Printed:
    inputs = [
        {"type": "promptString", "id": _input_id(s), "description": f"{s} for the {name} MCP server", "password": True}
        for s in server.secrets
    ]
    env = {**server.settings, **{s: f"${{input:{_input_id(s)}}}" for s in server.secrets}}
    entry = {"type": "stdio", "command": server.command[0], "args": server.command[1:], "env": env}
    notes = [
        "Write to .vscode/mcp.json in the workspace; VS Code asks for each key once and keeps it in its secret storage."
    ]
    return Printed(_json({"inputs": inputs, "servers": {name: entry}}), notes)


def _toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, everything else as is."""
    out = ['"']
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _codex(server: _Server, name: str) -> Printed:
    def array(items: Sequence[str]) -> str:
        return "[" + ", ".join(_toml_string(i) for i in items) + "]"

    env = ", ".join(f"{_toml_key(k)} = {_toml_string(v)}" for k, v in server.settings.items())
    lines = [
        f"[mcp_servers.{_toml_key(name)}]",
        f"command = {_toml_string(server.command[0])}",
        f"args = {array(server.command[1:])}",
        f"env = {{ {env} }}" if env else "env = {}",
        # Codex passes a server only a few variables of its own environment; keys go by name, never by value.
        f"env_vars = {array(server.secrets)}",
        f"startup_timeout_sec = {STARTUP_TIMEOUT}",
        f"tool_timeout_sec = {int(server.timeout + TIMEOUT_MARGIN)}",
    ]
    notes = ["Append to ~/.codex/config.toml; Codex forwards the env_vars from the environment it runs in."]
    return Printed("\n".join(lines), notes)


def _gemini(server: _Server, name: str) -> Printed:
    env = {**server.settings, **{s: f"${{{s}}}" for s in server.secrets}}
    entry = {
        "command": server.command[0],
        "args": server.command[1:],
        "env": env,
        "timeout": int((server.timeout + TIMEOUT_MARGIN) * 1000),  # milliseconds
    }
    notes = [
        "Merge into ~/.gemini/settings.json (or the project's .gemini/settings.json). In a folder you have not "
        "trusted, Gemini CLI starts no MCP server, user servers from ~/.gemini included: trust the folder."
    ]
    return Printed(_json({"mcpServers": {name: entry}}), notes)


_RENDERERS: dict[str, tuple[Callable[[_Server, str], Printed], Callable[[str], str]]] = {
    "claude-desktop": (_desktop, _absolute),
    "cursor": (_cursor, _workspace_relative),
    "vscode": (_vscode, _workspace_relative),
    "codex": (_codex, _absolute),
    "gemini": (_gemini, _absolute),
}


def render_client(
    client: str,
    server_args: Sequence[str],
    environ: Mapping[str, str],
    *,
    launcher: Launcher = "path",
    timeout: float,
    name: str = "rlm",
) -> Printed:
    """The registration `client` reads, for this server started with `server_args`.

    Args:
        client: One of `CLIENTS`.
        server_args: The server's own flags (``--root`` and the like), carried into the registration.
        environ: Where the settings are read from and which key variables are in use (never their values).
        launcher: How the client starts the server: this installation's absolute path, ``uvx`` or ``pipx``.
        timeout: The server's per-call ceiling in seconds (the clients' tool timeouts are set above it).
        name: The server's name in the client.

    Raises:
        ValueError: `client` is not one of `CLIENTS` (the message lists them), or `server_args` holds an HTTP
            flag or a value that is not UTF-8.
    """
    if client not in CLIENTS:
        raise ValueError(f"--print-config {client!r} is not a client; use one of: {', '.join(CLIENTS)}")
    _refuse_http(server_args)
    _refuse_store_password(server_args)
    if client == "claude":
        _utf8([*server_args, *(word for way in LAUNCHERS for word in launch_command(way))])
        return Printed(render("claude", server_args, environ, name=name))
    notes = _stand_in_notes(environ)
    if client == "json":
        command = _utf8([*launch_command(launcher), *server_args])
        return Printed(mcp_json(name, command, server_env(environ, "${{{name}}}", server_args)), notes)
    make, convert_path = _RENDERERS[client]
    settings, secrets = env_parts(environ, server_args)
    command = _utf8([*launch_command(launcher), *_rewrite_paths(server_args, convert_path)])
    printed = make(_Server(command, secrets, settings, timeout), name)
    return Printed(printed.text, notes + printed.notes)


def _refuse_http(server_args: Sequence[str]) -> None:
    """Refuse the HTTP flags: a client starts a stdio server, and ``--token``'s value is a secret."""
    for arg in server_args:
        flag = arg.split("=", 1)[0]
        if flag in HTTP_FLAGS:
            raise ValueError(
                f"--print-config registers a stdio server: drop {flag} (an HTTP client connects to a running "
                "`rlm-mcp --http` by its URL)"
            )


def _refuse_store_password(server_args: Sequence[str]) -> None:
    """Refuse a ``--store`` URL carrying a password (or a query, where libpq also takes one): the registration
    is a file users commit and share, so the password goes in the client's environment instead."""
    for index, arg in enumerate(server_args):
        flag, equals, value = arg.partition("=")
        if flag != "--store":
            continue
        url = value if equals else (server_args[index + 1] if index + 1 < len(server_args) else "")
        if _holds_password(url):
            raise ValueError(
                f"--store {shown_url(url)} holds a password, which the registration would write into the client's "
                "configuration: drop it from the URL and set PGPASSWORD (registered as a reference) or ~/.pgpass"
            )


def _holds_password(value: str) -> bool:
    """Whether a URL names a password, in its user part or its query (``?password=...``)."""
    try:
        url = urlparse(value.strip())
    except ValueError:
        return True
    return bool(url.password) or "password" in url.query.lower()


def _utf8(words: list[str]) -> list[str]:
    """`words`, refused if one cannot be written to a UTF-8 file (a path of undecodable bytes)."""
    for word in words:
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            shown = word.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ValueError(
                f"'{shown}' is not valid UTF-8, and MCP clients read their configuration as UTF-8: rename it"
            ) from None
    return words


def print_config(
    client: str,
    server_args: Sequence[str],
    environ: Mapping[str, str],
    *,
    launcher: Launcher = "path",
    timeout: float,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print `client`'s registration (notes to `err`) and return the exit status: 2, with one line, for an
    unknown client or flags no registration can carry."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        printed = render_client(client, server_args, environ, launcher=launcher, timeout=timeout)
    except ValueError as exc:
        print(f"rlm-mcp: {exc}", file=err)
        return 2
    print(printed.text, file=out)
    for note in printed.notes:
        print(f"# {note}", file=err)
    return 0
