"""The remote-sandbox benchmark runs end to end for every provider (tiny sizes: no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.remote_sandbox_bench import batch


@pytest.mark.parametrize("kind", ["modal", "prime", "daytona"])
async def test_a_small_batch_runs_and_leaves_nothing(kind: str, tmp_path: Path) -> None:
    (tmp_path / "context.txt").write_text("the context")
    row = await batch(kind, 3, 2, 0.0, tmp_path, trace=True)
    assert row["kind"] == kind and row["sandboxes"] == 3
    assert row["cells_per_s"] > 0 and row["heap_per_sandbox_kib"] > 0  # batch() itself asserts none is left running
