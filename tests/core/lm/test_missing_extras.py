"""This folder's tests are collected, and skip naming the extra, when an optional SDK is not installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
# The extras these tests use, hidden as if never installed; ``google`` hides google-genai's parent package,
# where a bare `find_spec("google.genai")` raises instead of answering None.
HIDDEN = ("google", "mcp", "boto3", "litellm", "anthropic")
RUN = """
import sys
import pytest

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hide())
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", {folder!r}]))
"""


def test_collection_does_not_crash_without_the_optional_sdks() -> None:
    code = RUN.format(hidden=set(HIDDEN), folder=str(HERE))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE.parents[2], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error" not in done.stdout.splitlines()[-1]
    assert "test_mcp_server_with_rlm_backend_bedrock" in done.stdout  # collected, to be skipped
