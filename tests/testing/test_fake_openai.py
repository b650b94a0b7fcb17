"""The fake server as the README runs it by hand, and its fault injection through the real SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import openai
import pytest

from rlm_adapters.testing import FakeOpenAIServer


def test_python_dash_m_serves_until_stopped() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "rlm_adapters.testing.fake_openai", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("serving on http://127.0.0.1:") and line.endswith("/v1")
        with urllib.request.urlopen(line.removeprefix("serving on ") + "/models", timeout=10) as response:
            assert json.load(response)["object"] == "list"
    finally:
        process.terminate()
        process.wait(10)


def test_leaf_policy_latency_counters_and_injected_429(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: prompt.upper()
    client = openai.OpenAI(base_url=fake_server.base_url, api_key="x", max_retries=1)
    fake_server.fail_next(status=429)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
    assert reply.choices[0].message.content == "HELLO"
    assert reply.usage is not None and reply.usage.prompt_tokens == 2
    counters = fake_server.counters
    assert (counters.requests, counters.faults_served, counters.leaf_requests) == (2, 1, 1)
    fake_server.fail_next(status=500)
    with pytest.raises(openai.InternalServerError):
        openai.OpenAI(base_url=fake_server.base_url, api_key="x", max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )


def test_help_says_what_it_answers_without_a_runpy_warning() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "rlm_adapters.testing.fake_openai", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and done.stderr == ""
    text = " ".join(done.stdout.split())
    assert "usage: python -m rlm_adapters.testing.fake_openai" in text
    assert 'prints len(context), and then a code block calling FINAL("done")' in text and "or NONE" in text
    assert "(default: 8000)" in text


def test_a_busy_port_is_one_line_naming_the_flag() -> None:
    with FakeOpenAIServer() as busy:
        done = subprocess.run(
            [sys.executable, "-m", "rlm_adapters.testing.fake_openai", "--port", str(busy.port)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--port" in done.stderr and "Traceback" not in done.stderr


def test_the_stand_alone_fake_finishes_over_this_repository() -> None:
    # Issue 37: the repository holds the text "FINAL(done)", so a bare FINAL(done) line was taken as a quote
    # of the input and the newcomer's first try ran out of iterations. Its FINAL is now a call in a repl block.
    repository = Path(__file__).resolve().parents[2]
    assert "FINAL(done)" in (repository / "rlm_adapters" / "testing" / "_server.py").read_text(encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "rlm_adapters.testing.fake_openai", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip().removeprefix("serving on ")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
        env |= {"OPENAI_BASE_URL": url, "RLM_MODEL": "fake", "OPENAI_API_KEY": "x"}
        done = subprocess.run(
            [sys.executable, "-m", "rlm_adapters", "ask", "--context", ".", "--max-iterations", "4",
             "What does this project do?"],
            cwd=repository, env=env, capture_output=True, text=True, timeout=300, check=False,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        process.terminate()
        process.wait(10)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "done"
