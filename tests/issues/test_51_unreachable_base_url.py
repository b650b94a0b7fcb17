"""Issue 51, item 8: an unreachable ``OPENAI_BASE_URL`` said only "Connection error.".

Now the line names the URL, why the connection failed and what to check, in `RLM`'s error and ``rlm ask``'s
one line (a closed port on 127.0.0.1: nothing listens there).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rlm_adapters import RLM, RLMRunFailed
from tests.cli.test_cli import RLM_BIN, run_rlm


@pytest.fixture
def closed_url() -> str:
    with socket.socket() as probe:  # bound, never listening, then closed: a port nothing answers on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_the_error_names_the_url_and_what_to_check(closed_url: str) -> None:
    kwargs = {"model_name": "m", "base_url": closed_url, "api_key": "k", "max_retries": 0}
    with pytest.raises(RLMRunFailed) as caught:
        RLM(backend="openai", backend_kwargs=kwargs, environment="local").completion("text", "q")
    message = str(caught.value)
    assert "\n" not in message
    assert f"at {closed_url}" in message and "Connection error." in message
    assert "check that the server is running and the host and port of base_url / OPENAI_BASE_URL" in message


@pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
def test_rlm_ask_says_it_in_one_line(closed_url: str, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_"))}
    env.update(OPENAI_BASE_URL=closed_url, OPENAI_API_KEY="k", RLM_MODEL="m")
    done = run_rlm(["ask", "-c", "a.txt", "--environment", "local", "q"], env, tmp_path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert closed_url in lines[0] and "check that the server is running" in lines[0]
