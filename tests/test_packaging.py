"""The package's metadata as built: an SPDX license expression, not the deprecated table (issue 17, item 7)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_declares_an_spdx_license_string() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"


def test_built_metadata_carries_the_license_expression_without_warnings(tmp_path: Path) -> None:
    build = "import sys, setuptools.build_meta as b; print(b.prepare_metadata_for_build_wheel(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", build, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    metadata = (tmp_path / done.stdout.strip().splitlines()[-1] / "METADATA").read_text(encoding="utf-8")
    assert "License-Expression: MIT" in metadata.splitlines()
    assert not any(line.startswith("License: ") for line in metadata.splitlines())
