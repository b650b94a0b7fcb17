"""``RLM_TRACING``: the values it takes, and ``rlm ask`` writing its spans to stderr (``console``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason='needs the OpenTelemetry SDK (pip install "rlm-adapters[otlp]")')

from rlm_adapters.core.tracing.export import configure_from_environment
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.testing import FakeOpenAIServer


def test_values_of_the_switch() -> None:
    assert configure_from_environment("x", {"RLM_TRACING": "off"}) is None
    assert configure_from_environment("x", {}) is None
    with pytest.raises(ConfigurationError, match="RLM_TRACING='jaeger' must be otlp, console or off"):
        configure_from_environment("x", {"RLM_TRACING": "jaeger"})


@pytest.mark.skipif(shutil.which("rlm") is None, reason="the rlm console script is not installed (pip install -e .)")
@pytest.mark.slow
def test_rlm_ask_writes_its_spans_to_stderr(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text\n", encoding="utf-8")
    fake_server.root = ["FINAL(done)"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "OTEL_"))}
    env.update(RLM_MODEL="root-model", OPENAI_BASE_URL=fake_server.base_url, OPENAI_API_KEY="k", RLM_TRACING="console")
    env["OTEL_RESOURCE_ATTRIBUTES"] = "openinference.project.name=my-rlm"  # Phoenix's project (docs/tracing.md)
    done = subprocess.run(
        [str(shutil.which("rlm")), "ask", "-c", "a.txt", "-q", "--environment", "local", "q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"  # stdout keeps the answer alone
    assert '"name": "invoke_agent rlm"' in done.stderr and '"service.name": "rlm"' in done.stderr
    assert '"openinference.project.name": "my-rlm"' in done.stderr
