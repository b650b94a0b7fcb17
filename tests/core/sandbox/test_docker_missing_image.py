"""A Docker image that is not on the engine is named, with how to get it (issue 17, item 7)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.docker import DockerSandbox, engine_problem
from rlm_adapters.errors import SandboxError
from rlm_adapters.testing import FakeOpenAIServer
from tests.sandbox_required import needs_sandbox

ABSENT = "rlm-adapters-test/absent-image:never"
PROBLEM = engine_problem(ABSENT)
ENGINE_DOWN = PROBLEM is not None and "is not on the engine" not in PROBLEM
needs_engine = needs_sandbox(
    f"no Docker engine answers (apt-get install docker.io): {PROBLEM}" if ENGINE_DOWN else None
)


async def _handler(kind: str, args: dict[str, object]) -> str:
    return ""


@needs_engine
async def test_the_sandbox_names_the_missing_image_and_the_fix(tmp_path: Path) -> None:
    sandbox = DockerSandbox(image=ABSENT)
    with pytest.raises(SandboxError) as caught:
        await sandbox.start(SandboxSetup(validate_context("ctx"), _handler, scratch=tmp_path))
    message = str(caught.value)
    assert f"the Docker image {ABSENT!r} is not on the engine" in message
    assert f"docker pull {ABSENT}" in message and "404" not in message


@needs_engine
@pytest.mark.skipif(shutil.which("rlm") is None, reason="the rlm console script is missing (pip install -e .)")
@pytest.mark.slow
def test_rlm_ask_with_docker_says_which_image_is_missing(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    default_image = DockerSandbox().image
    if engine_problem(default_image) is None:
        pytest.skip(f"the default image {default_image!r} is on this engine, so nothing is missing")
    (tmp_path / "a.txt").write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    env.update(RLM_MODEL="m", OPENAI_BASE_URL=fake_server.base_url, OPENAI_API_KEY="test")
    done = subprocess.run(
        ["rlm", "ask", "-c", "a.txt", "--environment", "docker", "q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert f"the Docker image {default_image!r} is not on the engine" in done.stderr
    assert f"docker pull {default_image}" in done.stderr and "Traceback" not in done.stderr
