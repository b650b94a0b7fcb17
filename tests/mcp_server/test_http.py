"""Streamable HTTP: loopback by default, and a bearer token on every request when one is set."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import server_env

TOKEN = "s3cret-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http_server(workspace: Path, env: dict[str, str], *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``rlm-mcp --http`` and return it with its URL once the port accepts connections."""
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


@pytest.fixture
def http_server(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> Iterator[str]:
    process, url = start_http_server(workspace, server_env(fake_server, tmp_path / "logs"), "--token", TOKEN)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)
        assert process.stderr is not None
        process.stderr.close()


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
