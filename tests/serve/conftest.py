"""`rlm serve` on 127.0.0.1 in a thread, in front of the fake OpenAI server (no network)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import uvicorn

from rlm_adapters.serve import ServeConfig, build_app, parse_model
from rlm_adapters.serve.http import protocol
from rlm_adapters.testing import FakeOpenAIServer

ANSWER_SCRIPT = ["```repl\nprint(len(context))\n```", "FINAL(42)"]


class Served:
    """An `rlm serve` app under uvicorn on a socket bound before it starts (connections queue until it
    accepts, so nothing waits for it to be ready)."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.app = build_app(config)
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(128)
        self.port = self.socket.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, log_level="warning", lifespan="on", http=protocol(config.request_timeout))
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.socket.close()


def served_config(upstream: FakeOpenAIServer, *specs: str, **options: Any) -> ServeConfig:
    """A config serving ``test`` (root-model over leaf-model at the fake server) and `specs` too."""
    url = upstream.base_url
    # These tests exercise the RLM route (the fake server's scripted root) unless a spec sets the direct one.
    specs = (f"test=root-model,sub=leaf-model,base_url={url}", *(spec.replace("{url}", url) for spec in specs))
    models = [
        parse_model(spec if "direct_below_tokens" in spec else f"{spec},direct_below_tokens=off") for spec in specs
    ]
    models = [replace(m, api_key="upstream-key") for m in models]
    options.setdefault("environment", "local")
    return ServeConfig(models, **options)


@pytest.fixture
def upstream() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(ANSWER_SCRIPT) as server:
        yield server


@pytest.fixture
def serve() -> Iterator[Callable[[ServeConfig], Served]]:
    """Start servers for a test; each is stopped at its end."""
    started: list[Served] = []

    def start(config: ServeConfig) -> Served:
        served = Served(config)
        started.append(served)
        return served

    yield start
    for served in started:
        served.close()


@pytest.fixture
def served(upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]) -> Served:
    return serve(served_config(upstream))
