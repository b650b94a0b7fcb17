"""`rlm ask --environment modal|prime|daytona`: accepted, and a missing key is one line naming its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.cli.test_cli import RLM_BIN, one_line, run_rlm, server_env

pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")


@pytest.mark.parametrize(
    ("kind", "variable"), [("modal", "MODAL_TOKEN_ID"), ("prime", "PRIME_API_KEY"), ("daytona", "DAYTONA_API_KEY")]
)
def test_a_cloud_sandbox_without_its_key_names_the_variable(
    kind: str, variable: str, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("x")
    env = {k: v for k, v in server_env(fake_server).items() if not k.startswith(("MODAL_", "PRIME_", "DAYTONA_"))}
    env["HOME"] = str(tmp_path)  # no ~/.modal.toml profile either
    done = run_rlm(["ask", "-c", "a.txt", "--environment", kind, "q"], env, tmp_path)
    assert done.returncode == 2
    assert f"--environment {kind} needs a key: set {variable}" in one_line(done.stderr)
    assert fake_server.counters.requests == 0
