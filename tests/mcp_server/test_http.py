"""Streamable HTTP: loopback by default, a bearer token on every request when one is set (refused to start
without one off loopback), and the client's roots never widen ``--root`` unless the operator allows it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ListRootsResult

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import server_env

TOKEN = "s3cret-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http_server(
    workspace: Path, env: dict[str, str], *extra: str, own_group: bool = False
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``rlm-mcp --http`` and return it with its URL once the port accepts connections (`own_group`: in a
    process group of its own, so that a test can kill it with its sandboxes)."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlm_adapters.mcp_server",
            "--http",
            "--port",
            str(port),
            "--root",
            str(workspace),
            *extra,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=own_group,
    )
    deadline = time.monotonic() + 60
    while True:
        # A process on the other side of a socket: nothing to await, so try to connect until it listens.
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                _, stderr = process.communicate()
                raise RuntimeError(f"rlm-mcp --http did not start: {stderr.decode(errors='replace')}") from None
            time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}/mcp"


def stop(process: subprocess.Popen[bytes]) -> str:
    """Stop a server started by `start_http_server`; what it wrote to stderr."""
    process.terminate()
    process.wait(10)
    assert process.stderr is not None
    err = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    return err


@contextlib.contextmanager
def served(workspace: Path, env: dict[str, str], *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`start_http_server` for the length of a ``with`` block."""
    process, url = start_http_server(workspace, env, *extra)
    try:
        yield process, url
    finally:
        stop(process)


class Connection:
    """A connected SDK client and the ``Mcp-Session-Id`` the server issued to it (None on 2026-07-28)."""

    def __init__(self, client: Client, ids: list[str]) -> None:
        self.client = client
        self._ids = ids

    @property
    def session_id(self) -> str | None:
        return self._ids[-1] if self._ids else None

    async def call(self, **arguments: Any) -> Any:
        return await self.client.call_tool("rlm_query", arguments)


@contextlib.asynccontextmanager
async def connect(
    url: str,
    *,
    mode: str = "auto",
    token: str | None = None,
    headers: dict[str, str] | None = None,
    roots: list[Path] | None = None,
) -> AsyncIterator[Connection]:
    """The SDK's own client over streamable HTTP (``mode="legacy"``: the initialize handshake and an MCP
    session; ``"auto"``: 2026-07-28, session-less). Leaving the block ends the MCP session (DELETE)."""
    ids: list[str] = []

    async def seen(response: httpx2.Response) -> None:
        issued = response.headers.get("mcp-session-id")
        if issued and issued not in ids:
            ids.append(issued)

    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    listed = None
    if roots is not None:

        async def listed(context: ClientRequestContext) -> ListRootsResult:
            return ListRootsResult.model_validate({"roots": [{"uri": r.as_uri(), "name": r.name} for r in roots]})

    # The SDK's own defaults (30 s, 300 s for streams): httpx's 5 s is shorter than a first call on a busy machine.
    timeout = httpx2.Timeout(30, read=300)
    http = httpx2.AsyncClient(headers=sent, timeout=timeout, event_hooks={"response": [seen]})
    async with (
        http,
        Client(streamable_http_client(url, http_client=http), mode=mode, list_roots_callback=listed) as client,
    ):
        yield Connection(client, ids)


@pytest.fixture
def http_server(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> Iterator[str]:
    token = tmp_path / "token"  # as the docs say to pass it: a file only this user reads, not an argument
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    process, url = start_http_server(workspace, server_env(fake_server, tmp_path / "logs"), "--token-file", str(token))
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)
        assert process.stderr is not None
        process.stderr.close()


@pytest.mark.slow
async def test_requests_without_the_token_are_refused(http_server: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx2.AsyncClient() as http:
        missing = await http.post(http_server, json=body)
        wrong = await http.post(http_server, json=body, headers={"Authorization": "Bearer nope"})
        health = await http.get(http_server.replace("/mcp", "/anything"))
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert wrong.status_code == 401
    assert health.status_code == 401


async def test_sdk_client_with_the_token_calls_the_tool(http_server: str, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    # The SDK's own defaults (30 s, 300 s for streams): httpx's 5 s is shorter than a first call on a busy machine.
    timeout = httpx2.Timeout(30, read=300)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=timeout)
    async with http, Client(streamable_http_client(http_server, http_client=http)) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["rlm_query"]
        result = await client.call_tool("rlm_query", {"query": "magic?", "paths": ["docs/a.md"]})
    assert result.content[0].text == "4242\n\nSources:\n- docs/a.md:1"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # roots by input request (2026-07-28) and roots/list mid-call
@pytest.mark.slow
async def test_client_roots_never_widen_root_over_http(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, mode: str
) -> None:
    """Issue 24, defect 2: a token holder offering ``file:///`` read a file outside ``--root``."""
    fake_server.root = scripted_root(['```repl\nFINAL(context[0]["text"])\n```'])
    secret = str(workspace.parent / "outside" / "secret.txt")
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--token", TOKEN, "--sandbox", "local") as (_, url):
        async with connect(url, mode=mode, token=TOKEN, roots=[Path("/")]) as conn:
            widened = await conn.call(query="q", paths=[secret])
            inside = await conn.call(query="q", paths=["docs/a.md"])
    assert widened.is_error and "outside the allowed roots" in widened.content[0].text
    assert "9999" not in widened.content[0].text
    assert inside.content[0].text.startswith("The magic number is 4242.")
    # The operator may let clients' roots in, explicitly.
    with served(workspace, env, "--token", TOKEN, "--sandbox", "local", "--allow-client-roots") as (_, url):
        async with connect(url, mode=mode, token=TOKEN, roots=[Path("/")]) as conn:
            allowed = await conn.call(query="q", paths=[secret])
    assert allowed.content[0].text.startswith("the secret magic number is 9999")


def test_allow_client_roots_is_refused_where_it_means_nothing(workspace: Path) -> None:
    from rlm_adapters.errors import ConfigurationError
    from rlm_adapters.mcp_server import parse_config

    with pytest.raises(ConfigurationError, match="--allow-client-roots is for --http"):
        parse_config(["--root", str(workspace), "--allow-client-roots"], environ={})
    with pytest.raises(ConfigurationError, match="contradicts --no-client-roots"):
        parse_config(["--root", str(workspace), "--http", "--allow-client-roots", "--no-client-roots"], environ={})


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "::", "my-laptop.example"])
@pytest.mark.slow
def test_without_a_token_only_loopback_is_served(workspace: Path, tmp_path: Path, host: str) -> None:
    """Issue 24, defect 2: with no token the server must refuse a host other machines reach, in one line."""
    env = server_env_base()
    flags = ["--http", "--host", host, "--port", str(free_port()), "--root", str(workspace)]
    command = [sys.executable, "-m", "rlm_adapters.mcp_server", *flags, "--log-dir", str(tmp_path / "logs")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    refusal = f"rlm-mcp: --host {host!r} is not loopback: set a token (--token-file FILE or RLM_MCP_TOKEN)"
    assert lines[0].startswith(refusal)


@pytest.mark.slow
def test_without_a_token_loopback_says_who_can_call(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    process, _ = start_http_server(workspace, server_env(fake_server, tmp_path / "logs"))
    err = stop(process)
    warnings = [line for line in err.splitlines() if "without a token" in line]
    assert len(warnings) == 1, err
    assert "any local process can call it" in warnings[0] and "RLM_MCP_TOKEN" in warnings[0]
    process, _ = start_http_server(workspace, server_env(fake_server, tmp_path / "logs"), "--token", TOKEN)
    err = stop(process)
    assert "without a token" not in err
    assert "rlm-mcp: --token is in the process list, where every local user can read it" in err  # still works


def server_env_base() -> dict[str, str]:
    """The environment without any model or server settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
