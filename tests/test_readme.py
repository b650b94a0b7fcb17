"""The README's first screen runs as written (issue 17): the try-it-without-a-key lines, in bash."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.extras import NOT_IN_THE_CORE, hiding_env

ROOT = Path(__file__).resolve().parents[1]


def first_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```bash\n(.*?)```", text, re.S)
    assert found is not None
    return found.group(1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_first_screen_installs_tries_configures_and_tests() -> None:
    """Issue 51: the only install line was the heaviest (every extra and the test tools, 8 min and 1.2 GB); a
    newcomer's first line is the core install, and the full one comes with the tests it is for."""
    lines = [line.split("  #")[0].strip() for line in first_block().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "pip install -e ."
    assert lines[-2:] == ['pip install -e ".[all,dev]"', "pytest"]
    assert "export RLM_MODEL=gpt-5-mini OPENAI_API_KEY=..." in lines


@pytest.mark.skipif(shutil.which("rlm") is None, reason="the rlm console script is missing (pip install -e .)")
def test_the_try_it_lines_answer_without_a_model_or_key(tmp_path: Path) -> None:
    """Run as the first line installs them: with every optional dependency looking uninstalled (`.ci/fresh`
    runs them in a real venv of ``pip install -e .`` alone)."""
    block = first_block()
    start = block.index("python -m rlm_adapters.testing.fake_openai")
    script = block[start : block.index("kill %1") + len("kill %1")].replace("8000", str(free_port()))
    # If a line fails, `set -e` stops before `kill %1`: the trap still stops the server.
    script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    hidden = hiding_env(tmp_path, NOT_IN_THE_CORE)
    env = {k: v for k, v in hidden.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    env["RLM_TEST_HIDDEN_MODULES"] = hidden["RLM_TEST_HIDDEN_MODULES"]
    done = subprocess.run(
        ["bash", "-euc", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "done"


def test_the_development_page_names_every_step_of_ci() -> None:
    """Each install command, apt package, npm package@version and check that .ci/run runs is in docs/development.md."""
    page = " ".join((ROOT / "docs" / "development.md").read_text(encoding="utf-8").split())
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "rm -rf .venv" in ci and "python3 -m venv .venv" in ci  # a new venv at every run
    assert "`rm -rf .venv`, `python3 -m venv .venv`" in page
    pip_installs = re.findall(r'python -m pip install --quiet --disable-pip-version-check (-e "[^"]+")', ci)
    assert pip_installs == ['-e ".[all,dev]"', '-e ".[bench]"']
    for target in pip_installs:
        assert f"python -m pip install {target}" in page, target
    for package in re.findall(r"apt-get install -y -qq (\w+)", ci):
        assert f"apt-get install {package}" in page, package
    npm = re.findall(r"(@[\w-]+/[\w-]+@[\d.]+)", ci)
    assert len(npm) == 4
    for package in npm:
        assert package in page, package
    for script in re.findall(r"^(bash \.ci/\w+(?:\.sh)?)", ci, re.M):
        assert f"`{script}`" in page, script
    for check in re.findall(r"^(ruff .+|mypy|pytest(?: -m slow)?)$", ci, re.M):
        assert f"`{check}`" in page, check


def serve_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Any app that speaks OpenAI: `rlm serve`", 1)[1]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


@pytest.mark.skipif(shutil.which("rlm") is None or shutil.which("curl") is None, reason="needs rlm and curl")
def test_the_serve_lines_answer_through_rlm_serve() -> None:
    """The README's `rlm serve` try-it lines: a fake model, `rlm serve` over it, curl gets the answer."""
    block = serve_block()
    assert "rlm serve --model rlm-mini=gpt-5-mini,sub=gpt-5-nano,max_cost=0.50" in block
    start = block.index("python -m rlm_adapters.testing.fake_openai")
    script = block[start : block.index("kill %1 %2") + len("kill %1 %2")]
    script = script.replace("8101", str(free_port())).replace("8102", str(free_port()))
    script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    done = subprocess.run(
        ["bash", "-euc", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply["object"] == "chat.completion" and reply["model"] == "rlm-fake"
    assert reply["choices"][0]["message"]["content"] == "done"
