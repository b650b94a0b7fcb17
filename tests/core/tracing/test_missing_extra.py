"""Without OpenTelemetry: ``tracing=True`` names the extra, the default traces nothing, and this folder skips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
HIDE = """
import sys

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
"""
RUN = """
from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.errors import MissingExtraError
print(RLM(backend=ScriptedModel(['FINAL(ok)']), environment='local').completion('c', 'q').response)
try:
    RLM(backend=ScriptedModel(['FINAL(ok)']), tracing=True)
except MissingExtraError as exc:
    print(exc)
"""
COLLECT = """
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-n", "0", {folder!r}, "-k", "not missing_extra"]))
"""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE + code],
        cwd=HERE.parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tracing_true_names_the_otel_extra() -> None:
    done = run(RUN)
    assert done.returncode == 0, done.stderr
    answer, message = done.stdout.splitlines()
    assert answer == "ok"
    assert "RLM(tracing=True)" in message and 'pip install "rlm-adapters[otel]"' in message


@pytest.mark.slow
def test_the_tracing_tests_skip_naming_the_package() -> None:
    done = run(COLLECT.format(folder=str(HERE)))
    assert done.returncode in (0, 5), done.stdout[-3000:]  # 5: every module skipped, none collected
    assert "skipped" in done.stdout.splitlines()[-1] and "failed" not in done.stdout.splitlines()[-1]
