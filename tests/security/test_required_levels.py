"""``RLM_REQUIRE_SANDBOX=1`` turns "launcher or engine missing" into a failure; ``CI=true`` does for this suite.

Each case runs pytest in a subprocess on a machine made to lack the system's bubblewrap (a PATH with only
this Python's folder) and a Docker engine (``DOCKER_HOST`` pointing at no socket).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.extras import REPO
from tests.sandbox_required import SWITCH

BWRAP = "tests/security/test_breakout.py::test_attack_is_contained[bwrap-system-read_host_file]"
DOCKER = "tests/security/test_breakout.py::test_attack_is_contained[docker-read_host_file]"
DOCKER_TEST = "tests/core/sandbox/test_docker.py::test_real_container_runs_cells_without_host_access"


def pytest_run(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``pytest ARGS`` in a subprocess, with neither switch set but those in `settings`."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", SWITCH)} | settings
    # Every level, docker's (marked slow) too: the run is not a developer's `pytest`, which leaves slow ones out.
    every = ["-m", "slow or not slow"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *every, *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def outcomes(tmp_path: Path, **settings: str) -> dict[str, tuple[str, str]]:
    """Test name -> (passed | skipped | failed, the message), for the three cases run with `settings`."""
    machine = {"PATH": str(Path(sys.executable).parent), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    report = tmp_path / "report.xml"
    done = pytest_run(f"--junitxml={report}", BWRAP, DOCKER, DOCKER_TEST, **settings, **machine)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    found: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        result = next(iter(case), None)
        outcome = (
            "passed" if result is None else {"skipped": "skipped", "failure": "failed", "error": "failed"}[result.tag]
        )
        found[case.attrib["name"]] = (outcome, "" if result is None else result.attrib.get("message", ""))
    assert len(found) == 3, found
    return found


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_without_the_switch_a_missing_launcher_or_engine_skips(tmp_path: Path) -> None:
    found = outcomes(tmp_path)
    assert [outcome for outcome, _ in found.values()] == ["skipped"] * 3
    bwrap, docker, docker_test = found.values()
    assert "apt-get install bubblewrap" in bwrap[1]
    assert "apt-get install docker.io" in docker[1] and "apt-get install docker.io" in docker_test[1]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_the_switch_makes_each_a_failure_naming_what_is_missing(tmp_path: Path) -> None:
    found = outcomes(tmp_path, **{SWITCH: "1"})
    assert [outcome for outcome, _ in found.values()] == ["failed"] * 3
    bwrap, docker, docker_test = (message for _, message in found.values())
    assert "no working system bubblewrap (apt-get install bubblewrap)" in bwrap
    assert "no Docker engine answers" in docker and "no usable Docker engine" in docker_test
    assert all(f"{SWITCH}=1 requires every sandbox level" in message for message in (bwrap, docker, docker_test))


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_ci_alone_requires_the_break_out_suite_at_every_level(tmp_path: Path) -> None:
    found = outcomes(tmp_path, CI="true")
    assert [outcome for outcome, _ in found.values()] == ["failed", "failed", "skipped"]
    assert all("CI=true requires every sandbox level" in message for _, message in list(found.values())[:2])


def test_a_switch_value_that_is_neither_on_nor_off_is_refused() -> None:
    done = pytest_run("--collect-only", "tests/test_layers.py", **{SWITCH: "true"})
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"{SWITCH} must be 1 (require every sandbox level) or 0, got 'true'" in done.stderr
