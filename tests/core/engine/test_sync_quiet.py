"""A sync run leaves nothing behind: no "Task exception was never retrieved" once its loop is gone."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    """
    import gc
    from rlm_adapters import RLM
    from rlm_adapters.testing import FakeOpenAIServer

    root = ["```repl\\nanswers = llm_query_batched([f'item {i}' for i in range(64)])\\nFINAL_VAR('answers')\\n```"]
    with FakeOpenAIServer(root=root, latency=0.01) as server:
        options = {"model_name": "root", "base_url": server.base_url, "api_key": "k"}
        for _ in range(2):
            result = RLM(
                backend="openai",
                backend_kwargs=options,
                other_backends=["openai"],
                other_backend_kwargs=[dict(options, model_name="leaf")],
                environment="local",
            ).completion("ctx", root_prompt="q")
            assert result.finish_reason == "final", result.error
        gc.collect()
    print("ok")
    """
)


@pytest.mark.slow
def test_completion_in_a_fresh_process_prints_nothing_to_stderr() -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, cwd=root, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert done.stderr == ""
