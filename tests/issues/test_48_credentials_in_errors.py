"""Issue 48, item 5: a failed model call never shows a client the upstream's credentials.

The operator's ``base_url`` carries ``user:password@`` and ``?api-key=``, and the upstream fails the call three
ways: a 400 whose body quotes the URL, the path, the ``Authorization`` header and the key it was sent; a refused
connection; no answer at all. Whatever each front end shows (`rlm serve`'s body and stream, `rlm-mcp`'s tool
result and progress, ``rlm ask``'s stdout, stderr and trajectory, ChatRLM's exception, `RLM`'s result, its
trajectory and what the REPL told the root model) holds none of the secrets, and still names the endpoint
without them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import timeit
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from rlm_adapters import RLM, RLMLogger, RLMRunFailed
from rlm_adapters.core.lm import public_endpoint, redact
from rlm_adapters.core.lm.redaction import endpoint_secrets
from rlm_adapters.serve import ServeConfig, parse_model
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing._http import ThreadedHTTPServer, write_response
from tests.serve.conftest import Served

USER, PASSWORD, SECRET, API_KEY = "operator", "hunter2-pass", "s3cr3t-query-key", "sk-upstream-key-4711"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
FORBIDDEN = (PASSWORD, SECRET, API_KEY, BASIC)
ASK = [{"role": "user", "content": "What is the magic number?"}]
SUB_CALL = "```repl\nprint(llm_query('the magic number?'))\n```"
RLM_BIN = shutil.which("rlm")


class EchoingUpstream(ThreadedHTTPServer):
    """Answers every request with a 400 whose message quotes what it was sent, as some gateways do: the
    configured URL, the request's path and ``Authorization`` header, and the API key."""

    wire = "echoing"
    quoted = ""

    async def respond(
        self, writer: asyncio.StreamWriter, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> bool:
        message = (
            f"no such deployment at {self.quoted}; you sent {method} {path} "
            f"with authorization {headers.get('authorization')!r} and api key {API_KEY}"
        )
        error = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
        write_response(writer, 400, error, None, {})
        await writer.drain()
        return True


class SilentUpstream(ThreadedHTTPServer):
    """Reads each request and never answers it."""

    wire = "silent"

    async def respond(
        self, writer: asyncio.StreamWriter, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> bool:
        await asyncio.Event().wait()
        return False


def with_credentials(url: str) -> str:
    """``http://127.0.0.1:PORT/v1`` with a user and password, and a key in its query string."""
    return url.replace("http://", f"http://{USER}:{PASSWORD}@") + f"?api-key={SECRET}"


@pytest.fixture(params=["echo", "refused", "silent"])
def failing(request: pytest.FixtureRequest) -> Iterator[str]:
    """A base URL with credentials whose upstream fails every call (one of three ways; a silent one is met
    by the per-request timeout where a test sets one, else by the run's)."""
    if request.param == "refused":
        with socket.socket() as probe:  # a port nobody listens on any more
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        yield with_credentials(f"http://127.0.0.1:{port}/v1")
        return
    server: ThreadedHTTPServer = EchoingUpstream() if request.param == "echo" else SilentUpstream()
    with server:
        url = with_credentials(f"{server.url}/v1")
        if isinstance(server, EchoingUpstream):
            server.quoted = url
        yield url


def named(failing: str, text: str) -> bool:
    """Whether `text` names the failing endpoint without its credentials (what a message should still say)."""
    return public_endpoint(failing) in text


def assert_clean(text: str, where: str) -> None:
    for secret in FORBIDDEN:
        assert secret not in text, f"{where} shows {secret!r}: {text[:3000]}"


# -- the masking itself -------------------------------------------------------------------------------------
def test_redact_masks_userinfo_key_parameters_and_the_known_secrets() -> None:
    url = with_credentials("http://127.0.0.1:9/v1") + "&api-version=2024-10-21"
    text = f"at {url}: sent /v1/?api-key={SECRET}chat/completions, Basic {BASIC}, key {API_KEY}; x?sig=abc&token=t1"
    masked = redact(text, (*endpoint_secrets(url), API_KEY))
    assert_clean(masked, "redact")
    assert "abc" not in masked and "t1" not in masked
    assert "http://127.0.0.1:9/v1?api-key=***&api-version=2024-10-21" in masked  # what routes stays readable
    assert public_endpoint(url) == "http://127.0.0.1:9/v1"
    escaped = json.dumps({"url": url}).replace("/", "\\/")  # as PHP's json_encode writes it
    assert PASSWORD not in redact(escaped) and "127.0.0.1:9" in redact(escaped)
    # What is not a credential is left alone: a mail address, a plain query, a user name beside a password.
    plain = "mail bob@example.com about https://example.com/docs?page=2&max_tokens=5 for user operator"
    assert redact(plain, endpoint_secrets(url)) == plain


def test_a_key_in_a_path_or_percent_encoded_is_masked_too() -> None:
    url = "https://tok%2Bvalue@host.example/v1?key=a%2Fb%2Bc&sig=zz%3D"
    secrets = endpoint_secrets(url)
    echoed = "got tok+value and tok%2Bvalue; key a/b+c (a%2Fb%2Bc), sig zz= in https://host.example/v1?sig=zz%3D"
    masked = redact(echoed, secrets)
    for leaked in ("tok+value", "tok%2Bvalue", "a/b+c", "a%2Fb%2Bc", "zz%3D"):
        assert leaked not in masked, masked


@pytest.mark.parametrize("unit", ["a.", "a://", "?a=", "x://y:", "a:b@", "%3F"])
def test_masking_takes_time_linear_in_the_text(unit: str) -> None:
    # A provider's error is the upstream's own text, masked on the event loop: no text may make it quadratic
    # (unbounded, "a.a.a..." did: 40 KB took 3 s). Ten times the text, about ten times the time.
    def best(text: str) -> float:
        return min(timeit.timeit(lambda: redact(text, [API_KEY]), number=1) for _ in range(5))

    small, large = best(unit * 2_000), best(unit * 20_000)
    assert large < 30 * small, (unit, small, large)


# -- the engine: result.error, the trajectory, what the root model was told ------------------------------------
def test_a_failed_run_shows_no_credentials_anywhere(failing: str, tmp_path: Path) -> None:
    with FakeOpenAIServer([SUB_CALL, "FINAL(done)"]) as root:
        rlm = RLM(
            backend="openai",
            backend_kwargs={"model_name": "root-model", "base_url": root.base_url, "api_key": "root-key"},
            other_backends=["openai"],
            other_backend_kwargs=[
                {"model_name": "leaf", "base_url": failing, "api_key": API_KEY, "timeout": 0.5, "max_retries": 0}
            ],
            environment="local",
            logger=RLMLogger(tmp_path),
        )
        result = rlm.completion("some context", "q?")
        told = json.dumps(root.requests_log)  # the REPL's "Error: ..." the root model read on its next turn
    assert "127.0.0.1" in told and "Error" in told, told  # the failure was shown, naming where
    assert_clean(told, "the root model's prompt")
    assert_clean(json.dumps(result.to_dict()), "the result")
    [log] = tmp_path.glob("rlm_*.jsonl")
    assert_clean(log.read_text(), "the trajectory")


def test_the_root_models_own_failure_ends_the_run_without_credentials(failing: str) -> None:
    settings = {"model_name": "root", "base_url": failing, "api_key": API_KEY, "timeout": 0.5, "max_retries": 0}
    rlm = RLM(backend="openai", backend_kwargs=settings, environment="local")
    with pytest.raises(RLMRunFailed) as caught:  # what the caller sees first is as clean as the result
        rlm.completion("some context", "q?")
    assert_clean(str(caught.value), "RLMRunFailed")
    result = caught.value.result
    assert result.finish_reason == "error" and result.error is not None
    assert named(failing, result.error)  # still says where, without what would let anyone in
    assert_clean(result.error, "result.error")


def test_an_overloaded_endpoint_is_named_without_its_credentials(tmp_path: Path) -> None:
    # The limit learnt per endpoint is logged (ConcurrencyCut): by the endpoint as shown, not as configured.
    with FakeOpenAIServer(["FINAL(done)"]) as upstream:
        upstream.fail_next(429, message="slow down")
        url = upstream.base_url.replace("http://", f"http://{USER}:{PASSWORD}@")
        settings = {"model_name": "root", "base_url": url, "api_key": API_KEY}
        result = RLM(
            backend="openai", backend_kwargs=settings, environment="local", logger=RLMLogger(tmp_path)
        ).completion("some context", "q?")
    assert result.response == "done"
    [log] = tmp_path.glob("rlm_*.jsonl")
    records = [json.loads(line) for line in log.read_text().split("\n") if line]
    assert [r["endpoint"] for r in records if r.get("kind") == "concurrency"] == [upstream.base_url]
    assert_clean(log.read_text(), "the trajectory")


def test_any_clients_error_quoting_its_url_is_masked_by_the_engine() -> None:
    # A LangChain model (or a user's own client) quotes its library's exception: the engine masks it once for all.
    pytest.importorskip("langchain_core")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class Unreachable(GenericFakeChatModel):
        async def _agenerate(self, *args: object, **kwargs: object) -> Any:
            raise ConnectionError(f"cannot reach {with_credentials('http://10.9.8.7/v1')}")

    rlm = RLM(backend="langchain", backend_kwargs={"model": Unreachable(messages=iter([]))}, environment="local")
    with pytest.raises(RLMRunFailed) as caught:
        rlm.completion("some context", "q?")
    assert_clean(str(caught.value), "RLMRunFailed")
    result = caught.value.result
    assert result.finish_reason == "error" and result.error is not None
    assert "http://10.9.8.7/v1" in result.error, result.error
    assert_clean(result.error, "result.error")


# -- the front ends ------------------------------------------------------------------------------------------
@pytest.fixture
def served_failing(failing: str) -> Iterator[Served]:
    model = replace(parse_model("test=root-model,run_timeout=2"), base_url=failing, api_key=API_KEY)
    served = Served(ServeConfig([model], environment="local"))
    yield served
    served.close()


def test_rlm_serve_bodies_and_stream_events_show_no_credentials(failing: str, served_failing: Served) -> None:
    url = f"{served_failing.base_url}/chat/completions"
    plain = httpx.post(url, json={"model": "test", "messages": ASK}, timeout=60)
    with httpx.stream("POST", url, json={"model": "test", "messages": ASK, "stream": True}, timeout=60) as response:
        streamed = "\n".join(response.iter_lines())
    assert plain.status_code >= 400 or "error" in plain.text, plain.text
    assert '"error"' in streamed, streamed
    assert named(failing, plain.text) == named(failing, streamed), (plain.text, streamed)
    assert_clean(plain.text, "rlm serve's body")
    assert_clean(streamed, "rlm serve's stream")


async def test_rlm_mcp_results_and_progress_show_no_credentials(failing: str, tmp_path: Path) -> None:
    from mcp import Client

    from rlm_adapters.mcp_server import ServerConfig, build_server

    config = ServerConfig(
        roots=[tmp_path], model="root", base_url=failing, api_key=API_KEY, sandbox="local",
        log_dir=tmp_path / "logs", timeout=2.0, environ={},
    )  # fmt: skip
    progress: list[str] = []

    async def record(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with Client(build_server(config)) as client:
        result = await client.call_tool("rlm_query", {"query": "q?", "text": "x"}, progress_callback=record)
    shown = json.dumps(result.model_dump(mode="json")) + "\n".join(progress)
    assert result.is_error or result.structured_content["finish_reason"] != "final", shown  # type: ignore[index]
    assert_clean(shown, "rlm-mcp's result")
    for log in (tmp_path / "logs").glob("*.jsonl"):
        assert_clean(log.read_text(), "rlm-mcp's trajectory")


@pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
def test_rlm_ask_shows_no_credentials(failing: str, tmp_path: Path) -> None:
    assert RLM_BIN is not None
    (tmp_path / "notes.txt").write_text("the magic number is 4242\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    env |= {"RLM_MODEL": "root", "OPENAI_API_KEY": API_KEY, "RLM_DOCUMENT_CACHE": "off"}
    done = subprocess.run(
        [RLM_BIN, "ask", "--base-url", failing, "--environment", "local", "--run-timeout", "2", "--log-dir", "logs",
         "--json", "--verbose", "--context", "notes.txt", "q?"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    shown = done.stdout + done.stderr
    assert done.returncode == 1 and "the run" in done.stderr, shown  # it ran, and failed
    assert named(failing, done.stderr) or "timeout" in done.stderr, done.stderr
    assert_clean(shown, "rlm ask's stdout and stderr")
    [log] = (tmp_path / "logs").glob("*.jsonl")
    assert_clean(log.read_text(), "rlm ask's trajectory")


def test_chat_rlm_raises_without_credentials(failing: str) -> None:
    pytest.importorskip("langchain_core")
    from rlm_adapters.langchain import ChatRLM

    llm = ChatRLM(model="root", base_url=failing, api_key=API_KEY, timeout=0.5, max_retries=0, environment="local")
    with pytest.raises(Exception) as raised:
        llm.invoke("q?")
    assert named(failing, str(raised.value))
    assert_clean(str(raised.value), "ChatRLM's exception")


# -- the last guards: text that is not a model error ----------------------------------------------------------
def test_error_bodies_tool_refusals_and_stderr_mask_a_quoted_url(capsys: pytest.CaptureFixture[str]) -> None:
    from rlm_adapters.cli.ask import say
    from rlm_adapters.mcp_server.runs.results import refusal
    from rlm_adapters.serve.errors import OpenAIError

    quoted = "cannot reach " + with_credentials("http://127.0.0.1:9/v1")
    assert_clean(json.dumps(OpenAIError(500, quoted, "server_error").body()), "an error body")
    assert_clean(str(refusal(ValueError(quoted))), "a tool refusal")
    say("rlm", quoted)
    assert_clean(capsys.readouterr().err, "rlm's stderr")
