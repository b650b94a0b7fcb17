"""The cold side-by-side's harness: each arm's program reaches its answer with the calls the scenario needs
(no timing is asserted; the virtualenvs are the benchmark's, here every arm runs in this interpreter)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from benchmarks.cold_bench import PROGRAMS, SUB_CALLS, Arm, run_once, table
from benchmarks.server import BenchServer

ROOT = Path(__file__).resolve().parents[2]
# arm -> the module it imports (the peers are in the `bench` extra)
MODULES = {"rlmflow": "rlmflow", "minrlm": "minrlm", "rlms": "rlm"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_arm_answers_with_two_root_calls_and_the_sub_calls(name: str, tmp_path: Path) -> None:
    module = MODULES.get(name)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} is not installed (the bench extra)")
    arm = Arm(name, Path(sys.executable), env=(("PYTHONPATH", str(ROOT)),))
    with BenchServer() as server:
        row = run_once(server, arm, tmp_path, latency=0.01)  # raises unless 2 root + 64 leaf calls, answer 64
        assert server.counts()["leaf_requests"] == SUB_CALLS
    assert row["seconds"] >= row["run"] > 0 and row["import"] > 0


def test_the_table_puts_the_fastest_first_and_compares_with_the_fastest_peer() -> None:
    def rows(*seconds: float) -> list[dict[str, float]]:
        return [{"seconds": s, "import": 0.1, "construction": 0.2, "run": s - 0.3} for s in seconds]

    text = table({"rlm-adapters, default sandbox": rows(3.0, 3.2, 2.9), "minrlm": rows(2.5, 2.6, 2.4)})
    lines = text.splitlines()
    assert lines[2].startswith("| minrlm | 2.50 | 1.00 |")
    assert lines[3].startswith("| rlm-adapters, default sandbox | 3.00 | 1.20 |")
