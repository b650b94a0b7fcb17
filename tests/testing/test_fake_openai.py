"""The fake server as the README runs it by hand, and its fault injection through the real SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

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
    assert "prints len(context), and then FINAL(done)" in text and "or NONE" in text
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
