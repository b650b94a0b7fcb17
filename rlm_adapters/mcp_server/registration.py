"""``rlm-mcp --print-config``: how to register this server with an MCP client so it starts from any shell.

``claude mcp add rlm -- rlm-mcp`` works only while the virtualenv that installed ``rlm-mcp`` is on the
``PATH`` of the shell that starts Claude Code; from any other shell ``claude mcp list`` says "Failed to
connect". The forms printed here do not depend on ``PATH``: this installation's absolute path, or a
``uvx`` / ``pipx run`` launcher that installs the package into a cached environment of its own.

Secrets are never printed: key variables appear as references (``"$OPENAI_API_KEY"`` for a shell,
``"${OPENAI_API_KEY}"`` in ``.mcp.json``, which Claude Code expands when it starts the server).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

import rlm_adapters
from rlm_adapters.flags import option_variables

Launcher = Literal["path", "uvx", "pipx"]
LAUNCHERS: tuple[Launcher, ...] = ("path", "uvx", "pipx")
FORMATS = ("claude", "json")
# Settings copied into the registration with their values, and key variables copied only as references.
SETTINGS = (
    "RLM_MODEL",
    "RLM_SUB_MODEL",
    "RLM_BACKEND",
    "OPENAI_BASE_URL",
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


def env_parts(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The settings to register with their values, and the key variables to register as references.

    With no model configured, the README's example model and OpenAI key stand in, to be edited.
    """
    settings = {name: environ[name] for name in SETTINGS if environ.get(name)}
    secrets = [name for name in SECRETS if environ.get(name)]
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


def server_env(environ: Mapping[str, str], reference: str) -> dict[str, str]:
    """The variables to register: settings with their values, keys as `reference` (``"${name}"``-style)."""
    settings, secrets = env_parts(environ)
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
        return mcp_json(name, [*launch_command(launcher), *server_args], server_env(environ, "${{{name}}}"))
    if kind != "claude":
        raise ValueError(f"unknown --print-config {kind!r}; use one of {list(FORMATS)}")
    env = server_env(environ, "${name}")
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
