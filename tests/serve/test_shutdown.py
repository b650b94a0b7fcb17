"""Stopping a real `rlm serve` process with real SIGINTs while openai SDK clients wait (issue 51, item 7).

The first Ctrl-C says what the server waits for and how to stop now, and the run finishes; the second stops the
runs: each client, streaming or not, gets OpenAI's error shape naming the shutdown, and no traceback is printed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
import uvicorn

from rlm_adapters.serve import build_app, shutdown
from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import ANSWER_SCRIPT, served_config

STARTUP = 60.0  # seconds a cold `python -m rlm_adapters serve` may take to answer on a loaded machine


class ServeProcess:
    """`rlm serve` in a child process in front of `upstream`, its stderr read line by line (ready once
    ``GET /v1/models`` answers `READY`)."""

    READY = 200

    def __init__(self, upstream: FakeOpenAIServer, *flags: str) -> None:
        with socket.socket() as probe:  # a free port (released for the child to bind)
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        # The RLM route (a served model answers short prompts directly by default): these runs hold a root call.
        spec = f"test=root-model,sub=leaf-model,base_url={upstream.base_url},direct_below_tokens=off"
        env = {**os.environ, "OPENAI_API_KEY": "upstream-key", "PYTHONPATH": os.pathsep.join(sys.path)}
        argv = ["serve", "--model", spec, "--environment", "local", "--port", str(self.port), *flags]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlm_adapters", *argv], env=env, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self._wait_until_ready()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"rlm serve exited: {self.lines}"
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == self.READY:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"rlm serve did not answer within {STARTUP} s: {self.lines}")

    def line_with(self, text: str, timeout: float = 30.0) -> str:
        """The first stderr line holding `text` (waiting for it)."""
        with self._changed:
            found = self._changed.wait_for(lambda: [line for line in self.lines if text in line], timeout)
        assert found, f"no line with {text!r} on stderr: {self.lines}"
        return found[0]

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def exit_code(self, timeout: float = 60.0) -> int:
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def start_serve() -> Iterator[Callable[[FakeOpenAIServer], ServeProcess]]:
    started: list[ServeProcess] = []

    def start(upstream: FakeOpenAIServer) -> ServeProcess:
        started.append(ServeProcess(upstream))
        return started[-1]

    yield start
    for served in started:
        served.kill()


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run `call` on a thread; what it returned or raised lands in the dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ask(client: openai.OpenAI) -> str | None:
    reply = client.chat.completions.create(model="test", messages=[{"role": "user", "content": "how long?"}])
    return reply.choices[0].message.content


def ask_streaming(client: openai.OpenAI) -> list[Any]:
    stream = client.chat.completions.create(
        model="test", messages=[{"role": "user", "content": "how long?"}], stream=True
    )
    return list(stream)


def test_the_second_sigint_stops_the_runs_and_every_client_gets_an_error_naming_the_shutdown(
    start_serve: Callable[[FakeOpenAIServer], ServeProcess],
) -> None:
    with FakeOpenAIServer(ANSWER_SCRIPT, root_latency=300) as upstream:  # a root reply held for 5 minutes
        served = start_serve(upstream)
        client = openai.OpenAI(base_url=served.base_url, api_key="unused")  # the SDK's default retries
        plain, plain_outcome = in_background(lambda: ask(client))
        streaming, streaming_outcome = in_background(lambda: ask_streaming(client))
        wait_for(lambda: upstream.counters.in_flight >= 2)  # both runs wait for their root call

        served.interrupt()
        waiting = served.line_with("stopping")
        assert "waiting for 2 runs in flight" in waiting and "press Ctrl-C again" in waiting
        time.sleep(0.5)
        assert plain.is_alive() and streaming.is_alive()  # the first Ctrl-C waits for them

        served.interrupt()
        plain.join(30)
        streaming.join(30)
        assert served.exit_code() == 130  # runs were cut: interrupted

    error = plain_outcome.get("error")  # not a connection error: the client did not retry into a server gone
    assert isinstance(error, openai.APIStatusError) and error.status_code == 503, plain_outcome
    assert error.body["code"] == "server_shutting_down" and "rlm serve was stopped" in error.body["message"]  # type: ignore[index]
    streamed = streaming_outcome.get("error")
    assert isinstance(streamed, openai.APIError) and "rlm serve was stopped" in streamed.message, streaming_outcome
    output = "\n".join(served.lines)
    assert "Traceback" not in output and "CancelledError" not in output and "KeyboardInterrupt" not in output
    assert "stopping 2 runs now" in output


def test_the_first_sigint_lets_the_run_finish_and_says_how_to_stop_now(
    start_serve: Callable[[FakeOpenAIServer], ServeProcess],
) -> None:
    with FakeOpenAIServer(ANSWER_SCRIPT, root_latency=1.5) as upstream:  # a run of about 3 s
        served = start_serve(upstream)
        client = openai.OpenAI(base_url=served.base_url, api_key="unused")
        plain, outcome = in_background(lambda: ask(client))
        wait_for(lambda: upstream.counters.in_flight >= 1)

        served.interrupt()
        line = served.line_with("stopping")
        plain.join(60)
        assert served.exit_code() == 0  # a clean stop: every run finished

    assert "waiting for 1 run in flight" in line and "press Ctrl-C again to stop it now" in line
    assert outcome == {"value": "42"}
    assert "Traceback" not in "\n".join(served.lines)


def test_a_sigint_with_nothing_in_flight_stops_at_once(start_serve: Callable[[FakeOpenAIServer], ServeProcess]) -> None:
    with FakeOpenAIServer(ANSWER_SCRIPT) as upstream:
        served = start_serve(upstream)
        served.interrupt()
        assert served.exit_code(timeout=30) == 0
    assert served.line_with("stopping") == "rlm serve: stopping"
    assert "Traceback" not in "\n".join(served.lines)


def test_the_grace_period_ending_stops_the_runs_as_a_second_signal_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process, with a short grace: the first signal's wait is bounded, and ends as the second Ctrl-C does."""
    monkeypatch.setattr(shutdown, "GRACE_SECONDS", 0.5)
    with FakeOpenAIServer(ANSWER_SCRIPT, root_latency=300) as upstream:
        app = build_app(served_config(upstream))
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        listening.listen(16)
        server = shutdown.StoppingServer(uvicorn.Config(app, log_level="warning"), app.state.server)
        serving = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
        serving.start()
        port = listening.getsockname()[1]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        plain, outcome = in_background(lambda: ask(client))
        wait_for(lambda: upstream.counters.in_flight >= 1)
        server.handle_exit(signal.SIGTERM, None)  # as the signal would (it hands its work to the server's loop)
        plain.join(30)
        serving.join(30)
        listening.close()
    error = outcome.get("error")
    assert isinstance(error, openai.APIStatusError) and error.status_code == 503, outcome
    assert not serving.is_alive() and server.exit_code == 130
