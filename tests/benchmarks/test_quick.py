"""`python -m benchmarks.run --quick` completes every scenario with the expected call counts.

Timings are never asserted: this machine's speed is not the engine's. The reference arm runs only when
`rlms` 0.1.3 is installed (``pip install -e ".[bench]"``); otherwise it is skipped cleanly.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import reference  # noqa: E402

# The quick run aims at under a minute on an idle 2-core machine; the margin is for a busy CI box.
# The peers and every timing scenario of the benchmarks (its fixtures alone took 144 s at a load of 6).
pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``--quick`` run in a subprocess (its own event loops and child processes), its JSON loaded."""
    out = tmp_path_factory.mktemp("bench")
    command = [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)]
    if reference.available() is not None:
        command.append("--no-reference")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=380)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-3000:]}"
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    data["stdout"] = done.stdout
    data["out"] = str(out)
    return data


def _arms_expected(result: dict[str, Any], with_reference: bool, peers: set[str]) -> set[str]:
    arms = {"ours"}
    if with_reference and not result["name"].startswith("growth"):
        arms.add("reference")
    if result["name"].startswith(("fan-out", "overhead/fan-out")):
        arms.add("floor")
    if result["peers"]:
        arms |= peers
        if "floor" in arms:
            arms.add("floor-threads")
    return arms


@pytest.mark.slow
def test_the_peers_run_the_fan_out_and_overhead_scenarios(quick_results: dict[str, Any]) -> None:
    """minrlm and rlmflow, when installed at the pinned versions (the bench extra), run beside ours."""
    meta = quick_results["meta"]
    assert set(meta["peers"]) | set(meta["peers_skipped"]) == {"minrlm", "rlmflow"}
    with_peers = {r["name"] for r in quick_results["results"] if r["kind"] == "timing" and r["peers"]}
    assert with_peers == {"fan-out 64", "overhead/run", "overhead/fan-out 64"}
    for name, why in meta["peers_skipped"].items():
        assert name in why and ("not installed" in why or "pin" in why), why


def test_every_timing_scenario_makes_the_expected_calls(quick_results: dict[str, Any]) -> None:
    with_reference = quick_results["meta"]["reference_skipped"] is None
    peers = set(quick_results["meta"]["peers"])
    timing = [r for r in quick_results["results"] if r["kind"] == "timing"]
    assert {r["name"].split()[0] for r in timing} >= {"fan-out", "nested", "overhead/run", "overhead/nested"}
    for result in timing:
        assert set(result["arms"]) == _arms_expected(result, with_reference, peers), result["name"]
        for arm, data in result["arms"].items():
            assert data["runs"], (result["name"], arm)
            for run in data["runs"]:
                assert run["error"] is None, (result["name"], arm, run["error"])
                expected = result["expected"]
                if arm.startswith("floor"):
                    expected = {"root": 1, "leaf": expected["leaf"]}
                assert run["counts"]["root_requests"] == expected["root"], (result["name"], arm)
                assert run["counts"]["leaf_requests"] == expected["leaf"], (result["name"], arm)


def test_context_and_growth_scenarios_complete(quick_results: dict[str, Any]) -> None:
    with_reference = quick_results["meta"]["reference_skipped"] is None
    sized = {r["kind"]: r for r in quick_results["results"] if r["kind"] in ("context", "growth")}
    assert set(sized) == {"context", "growth"}
    for kind, result in sized.items():
        sides = {p["side"] for p in result["points"]}
        assert sides == ({"ours", "reference"} if with_reference and kind == "context" else {"ours"})
        for point in result["points"]:
            assert point["error"] is None, point
            runs = 2  # a warm-up run, then the measured one, in each measuring process
            assert point["counts"]["root_requests"] == 3 * runs, point
            assert point["counts"]["leaf_requests"] == 1 * runs, point
            assert point["log_bytes"] > 0


def test_outputs_are_written(quick_results: dict[str, Any]) -> None:
    assert "scenario" in quick_results["stdout"] and "fan-out" in quick_results["stdout"]
    if importlib.util.find_spec("matplotlib") is not None:
        assert (Path(quick_results["out"]) / "growth.png").stat().st_size > 0
    assert set(quick_results["derived"]["growth_exponents"]) == {
        "time",
        "host_memory",
        "worker_memory",
        "log_size",
    }


def test_reference_arm_is_skipped_cleanly_when_absent(quick_results: dict[str, Any]) -> None:
    skipped = quick_results["meta"]["reference_skipped"]
    if reference.available() is None:
        assert skipped is None and quick_results["meta"]["reference"] == "rlms 0.1.3"
    else:
        assert skipped and "reference arm skipped" in quick_results["stdout"]
