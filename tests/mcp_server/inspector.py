"""The MCP Inspector CLI, pinned: the npm package `@modelcontextprotocol/inspector` at `VERSION`, run from
where npm installed it (never fetched at test time). Tests that need it skip with the package's name."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

VERSION = "0.15.0"
PACKAGE = f"@modelcontextprotocol/inspector@{VERSION}"


def _find() -> list[str] | None:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        return None
    try:
        root = subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    package = Path(root.stdout.strip()) / "@modelcontextprotocol" / "inspector"
    try:
        manifest = json.loads((package / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("version") != VERSION:
        return None
    return [node, str(package / manifest["bin"]["mcp-inspector"]), "--cli"]


INSPECTOR = _find() or []
needs_inspector = pytest.mark.skipif(
    not INSPECTOR, reason=f"needs the npm package {PACKAGE} (npm install -g {PACKAGE}) and Node.js"
)
