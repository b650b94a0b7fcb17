"""Without an optional extra, collecting the tests does not crash: what needs it is skipped, naming the extra."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras import NEEDS_EXTRA, OPTIONAL, REPO, hiding_env


def collect(tmp_path: Path, hidden: tuple[str, ...]) -> list[str]:
    """The lines of ``pytest --collect-only`` over the whole suite, run with `hidden` uninstalled.

    The whole suite: a folder named on the command line has its conftest imported before any hook can skip it.
    """
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-rs",
            "tests",
        ],
        cwd=REPO,
        env=hiding_env(tmp_path, hidden),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    lines = done.stdout.splitlines()
    assert "error" not in lines[-1] and " collected" in lines[-1], lines[-1]
    assert not [line for line in lines if line.startswith("ERROR")]
    return lines


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_no_optional_extra_at_all(tmp_path: Path) -> None:
    lines = collect(tmp_path, OPTIONAL)
    skipped = {line.split(": ", 1)[0].removeprefix("SKIPPED [1] "): line for line in lines if "SKIPPED" in line}
    # Each folder and module that needs an extra to be collected is skipped as a whole, naming the extra.
    for where, needs in NEEDS_EXTRA.items():
        reason = skipped.get(f"tests/{where}", "")
        if where.startswith(tuple(f"{other}/" for other in NEEDS_EXTRA)):
            continue  # inside a folder skipped already
        assert [extra for _, extra in needs if f'pip install "rlm-adapters[{extra}]"' in reason], (where, reason)
    summary = next(line for line in lines if line.startswith("skipped for missing optional extras:"))
    assert 'pip install "rlm-adapters[' in summary and "mcp" in summary and "tests/langchain" in summary
    # Tests that skip one by one are still collected, to be skipped with their own reason when they run.
    assert any("test_mcp_server_with_rlm_backend_bedrock" in line for line in lines)
    assert any("tests/viewer/test_browser.py::" in line for line in lines)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_dependency_of_an_extra_missing(tmp_path: Path) -> None:
    """mcp and daytona installed but not what they import: skipped too, saying which import failed."""
    lines = collect(tmp_path, ("opentelemetry",))
    reasons = "\n".join(line for line in lines if "SKIPPED" in line)
    # Which opentelemetry module fails first depends on the versions installed (daytona and mcp import
    # different ones first), so the message is matched up to the hidden package's own name.
    hidden = r"which cannot import opentelemetry(\.\w+)*"
    assert re.search(rf'tests/mcp_server: needs mcp, {hidden} \(pip install "rlm-adapters\[mcp\]"\)', reasons), reasons
    assert re.search(rf'needs daytona\._async\.daytona, {hidden} \(pip install "rlm-adapters\[daytona\]"\)', reasons), (
        reasons
    )
