"""deploy/compose.yaml as it is tested (issue 52): its replicas' commands and its nginx.conf, run on one host.

Docker Hub is out of reach here, so the images are not built; everything the compose file says about the
service is run instead: PostgreSQL (the test cluster of tests/postgres.py, the password in a pgpass file as the
compose file gives it), two replicas of each server started with the compose file's own command lines (only the
addresses, the files and the model are this host's), and nginx with the compose file's nginx.conf (only the
upstream names resolved to the replicas' ports).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from rlm_adapters.core.cache import shown_url
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer
from tests.postgres import PASSWORD, free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
NGINX_CONF = (DEPLOY / "nginx.conf").read_text()
CALLS = 3 + 12  # BATCHES: three root turns, two batches of six sub-calls
MESSAGES = [{"role": "user", "content": "the deployment's document. Add up the magic numbers."}]
STARTUP = 90.0


def _command(service: str) -> list[str]:
    return [str(word) for word in COMPOSE["services"][service]["command"]]


def _value(command: Sequence[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _replaced(command: Sequence[str], values: dict[str, str]) -> list[str]:
    """`command` with the value after each flag of `values` replaced (each flag must be in it)."""
    out = list(command)
    for flag, value in values.items():
        out[out.index(flag) + 1] = value
    return out


def test_the_compose_file_runs_two_replicas_of_each_server_on_one_store() -> None:
    services = COMPOSE["services"]
    assert set(services) == {"db", "serve", "mcp", "balancer"}
    for name in ("serve", "mcp"):
        command = _command(name)
        assert services[name]["deploy"]["replicas"] == 2
        store = _value(command, "--store")
        assert store.startswith("postgresql://") and urllib.parse.urlsplit(store).password is None
        assert urllib.parse.urlsplit(store).hostname == "db"
        assert services[name]["environment"]["PGPASSFILE"] == "/run/secrets/pgpass"
        assert "--token-file" in command
    # The real parsers take the commands as written (an unknown or misspelled flag fails here).
    from rlm_adapters.cli._main import build_parser
    from rlm_adapters.mcp_server import parse_config
    from rlm_adapters.serve.served_models import parse_model

    token = Path(tempfile.mkdtemp()) / "token"
    token.write_text("t" * 32)
    token.chmod(0o600)
    environ = {"OPENAI_API_KEY": "k"}
    serve = build_parser().parse_args(_replaced(_command("serve")[1:], {"--token-file": str(token)}))
    (spec,) = serve.model  # compose fills in the defaults of ${RLM_MODEL:-...}
    model = parse_model(spec.replace("${RLM_MODEL:-gpt-5-mini}", "gpt-5-mini").replace(
        "${RLM_SUB_MODEL:-gpt-5-nano}", "gpt-5-nano"))  # fmt: skip
    assert model.name == "rlm"
    mcp = _replaced(_command("mcp")[1:], {"--token-file": str(token), "--model": "gpt-5-mini", "--sub-model": "m"})
    parse_config(mcp, environ=environ)
    # nginx sends /v1/ and /mcp to the services at the ports their commands listen on.
    assert f"server serve:{_value(_command('serve'), '--port')};" in NGINX_CONF
    assert f"server mcp:{_value(_command('mcp'), '--port')};" in NGINX_CONF
    assert services["balancer"]["ports"] == ["8080:8080"] and "listen 8080;" in NGINX_CONF


class Replica:
    """One server process started from a compose command line, its stderr read line by line."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_listening(self) -> None:
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"{self.process.args!r} exited: {self.lines}"
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.process.args!r} did not listen within {STARTUP} s: {self.lines}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _balancer_conf(serve_ports: Sequence[int], mcp_ports: Sequence[int], port: int, scratch: Path) -> str:
    """nginx.conf with Docker's service names resolved to this host's replicas, and its scratch files in `scratch`."""
    conf = NGINX_CONF.replace("/tmp/rlm-balancer", str(scratch / "balancer"))
    serve = " ".join(f"server 127.0.0.1:{p};" for p in serve_ports)
    mcp = " ".join(f"server 127.0.0.1:{p};" for p in mcp_ports)
    conf = conf.replace(f"server serve:{_value(_command('serve'), '--port')};", serve)
    conf = conf.replace(f"server mcp:{_value(_command('mcp'), '--port')};", mcp)
    return conf.replace("listen 8080;", f"listen 127.0.0.1:{port};")


@pytest.fixture
def deployment(store_url: str) -> Iterator[dict[str, Any]]:
    nginx = shutil.which("nginx")
    if nginx is None:
        pytest.skip("nginx is missing: install the Debian package nginx-light (deploy/nginx.conf is the balancer)")
    # Scratch space nginx's workers (user nobody under root) can write: not pytest's 0700 tmp_path.
    scratch = Path(tempfile.mkdtemp(prefix="rlm-deploy-"))
    scratch.chmod(0o755)
    (scratch / "balancer").mkdir(mode=0o777)
    (scratch / "balancer").chmod(0o777)
    parts = urllib.parse.urlsplit(store_url)
    pgpass = scratch / "pgpass"
    pgpass.write_text(f"{parts.hostname}:{parts.port}:{parts.path.lstrip('/')}:{parts.username}:{PASSWORD}\n")
    pgpass.chmod(0o600)
    token_file = scratch / "rlm_token"
    token_file.write_text("deploy-token-" + "x" * 24 + "\n")
    token_file.chmod(0o600)
    store = shown_url(store_url)  # as in the compose file: no password in the URL, libpq reads PGPASSFILE
    upstream = LedgerServer(root=BATCHES, latency=0.02)
    upstream.__enter__()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "PG"))}
    env.update(OPENAI_API_KEY="upstream-key", PGPASSFILE=str(pgpass), PYTHONPATH=os.pathsep.join(sys.path))
    scripts = Path(sys.executable).parent
    replicas: list[Replica] = []
    balancer: subprocess.Popen[str] | None = None
    try:
        serve_ports, mcp_ports = [free_port(), free_port()], [free_port(), free_port()]
        local = {"--host": "127.0.0.1", "--token-file": str(token_file), "--store": store}
        for port in serve_ports:
            spec = f"rlm=root-model,sub=leaf-model,base_url={upstream.base_url},direct_below_tokens=off"
            argv = _replaced(_command("serve"), {**local, "--port": str(port), "--model": spec})
            replicas.append(Replica([str(scripts / argv[0]), *argv[1:]], env, port))
        for port in mcp_ports:
            argv = _replaced(_command("mcp"), {**local, "--port": str(port), "--model": "root-model"})
            argv = _replaced(argv, {"--sub-model": "leaf-model"})
            mcp_env = {**env, "OPENAI_BASE_URL": upstream.base_url, "RLM_MCP_LOG_DIR": str(scratch / "logs")}
            replicas.append(Replica([str(scripts / argv[0]), *argv[1:]], mcp_env, port))
        for replica in replicas:
            replica.wait_listening()
        port = free_port()
        conf = scratch / "nginx.conf"
        conf.write_text(_balancer_conf(serve_ports, mcp_ports, port, scratch))
        balancer = subprocess.Popen(
            [nginx, "-c", str(conf), "-p", str(scratch), "-g", "daemon off;"], stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 30
        while True:
            assert balancer.poll() is None, balancer.stderr.read() if balancer.stderr else ""
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "nginx did not listen"
            time.sleep(0.1)
        yield {
            "url": f"http://127.0.0.1:{port}",
            "token": token_file.read_text().strip(),
            "upstream": upstream,
            "serve_ports": serve_ports,
            "mcp_ports": mcp_ports,
            "replicas": replicas,
        }
    finally:
        if balancer is not None:
            balancer.kill()
            balancer.wait()
        for replica in replicas:
            replica.stop()
        upstream.__exit__(None, None, None)
        shutil.rmtree(scratch, ignore_errors=True)
    assert not [line for replica in replicas for line in replica.lines if PASSWORD in line]


@pytest.mark.timeout(300)
def test_the_deployment_spreads_requests_and_a_retry_on_the_other_replica_is_free(deployment: dict[str, Any]) -> None:
    upstream: LedgerServer = deployment["upstream"]
    client = openai.OpenAI(base_url=deployment["url"] + "/v1", api_key=deployment["token"], max_retries=0, timeout=120)
    served_by: list[str] = []
    for _ in range(2):  # round robin: the same request on each replica in turn
        raw = client.chat.completions.with_raw_response.create(model="rlm", messages=MESSAGES)  # type: ignore[arg-type]
        assert raw.parse().choices[0].message.content == BATCHES_ANSWER
        served_by.append(raw.headers["x-rlm-replica"])
    assert sorted(served_by) == sorted(f"127.0.0.1:{p}" for p in deployment["serve_ports"]), served_by
    # The first request paid every call; the second, on the other replica, replayed them all from the store.
    assert len(upstream.arrived) == CALLS, len(upstream.arrived)
    # Without the token the balancer passes the replicas' own refusal.
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=deployment["url"] + "/v1", api_key="wrong", max_retries=0).models.list()
    # The balancer passes Host and Origin on, so a web page reaching it (DNS rebinding, a cross-site fetch with a
    # token it somehow holds) meets the replicas' own checks.
    token = {"Authorization": f"Bearer {deployment['token']}"}
    models = deployment["url"] + "/v1/models"
    assert httpx.get(models, headers=token, timeout=30).status_code == 200
    foreign_origin = httpx.get(models, headers={**token, "Origin": "http://evil.example"}, timeout=30)
    assert foreign_origin.status_code == 403 and "invalid_origin" in foreign_origin.text
    rebound = httpx.get(models, headers={**token, "Host": "evil.example:8080"}, timeout=30)
    assert rebound.status_code == 421 and "invalid_host" in rebound.text


@pytest.mark.timeout(300)
def test_an_mcp_client_stays_on_one_replica_through_the_balancer(deployment: dict[str, Any]) -> None:
    import asyncio

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from rlm_adapters.testing.fake_openai import scripted_root

    upstream: LedgerServer = deployment["upstream"]
    upstream.root = scripted_root(['```repl\nFINAL(llm_query("the magic number is 7777"))\n```'])

    async def ask() -> tuple[str, set[str]]:
        seen: set[str] = set()

        async def note(response: httpx2.Response) -> None:
            seen.add(response.headers.get("x-rlm-replica", ""))

        http = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {deployment['token']}"},
            timeout=httpx2.Timeout(30, read=300),
            event_hooks={"response": [note]},
        )
        async with http, Client(streamable_http_client(deployment["url"] + "/mcp", http_client=http)) as client:
            result = await client.call_tool("rlm_query", {"query": "the magic number?", "text": "a short note"})
        return result.content[0].text, seen  # type: ignore[union-attr]

    text, seen = asyncio.run(ask())
    assert "7777" in text
    # Every request of the session (initialize, the call, its stream, the close) went to one replica.
    assert len(seen) == 1 and seen <= {f"127.0.0.1:{p}" for p in deployment["mcp_ports"]}, seen
    assert httpx.get(deployment["url"] + "/mcp", timeout=10).status_code == 401
