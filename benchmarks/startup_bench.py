"""Start-up times: ``python -m benchmarks.startup_bench [--reps N]``.

What a user waits for before anything runs (issue 30): ``import rlm_adapters``, ``from rlm_adapters import
RLM``, ``rlm --help``, and ``rlm-mcp`` ready (a fresh server over stdio has answered ``initialize`` and
``tools/list``). Each is a fresh process, timed from its spawn to its exit (or to the ``tools/list`` reply),
median of `--reps`; the floor is the same interpreter doing nothing (``python -c pass``), and the peers'
imports (``import minrlm``, ``import rlmflow``) run beside ours when installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT = 60.0
# name -> target in seconds (None: shown for comparison only)
TARGETS: dict[str, float | None] = {
    "python -c pass": None,
    "import rlm_adapters": 0.15,
    "from rlm_adapters import RLM": None,
    "rlm --help": 0.15,
    "rlm-mcp ready": 0.6,
    "import minrlm": None,
    "import rlmflow": None,
}


def _env() -> dict[str, str]:
    # No model settings from the caller's shell: the server must start without any.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "RLM_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def _timed_exit(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def _send(pipe: IO[bytes], message: dict[str, Any]) -> None:
    pipe.write((json.dumps(message) + "\n").encode())
    pipe.flush()


def _reply(pipe: IO[bytes], request_id: int) -> dict[str, Any]:
    while True:
        line = pipe.readline()
        if not line:
            raise RuntimeError("rlm-mcp closed stdout before answering")
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            if "error" in message:
                raise RuntimeError(f"rlm-mcp answered with an error: {message['error']}")
            return message


def mcp_ready(root: Path) -> float:
    """Seconds from spawning ``rlm-mcp`` over stdio to its answer to ``tools/list`` (after ``initialize``)."""
    command = [sys.executable, "-m", "rlm_adapters.mcp_server", "--root", str(root)]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        _send(
            process.stdin,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "startup-bench", "version": "1"},
                },
            },
        )
        _reply(process.stdout, 1)
        _send(process.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(process.stdin, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = _reply(process.stdout, 2)
        elapsed = time.perf_counter() - started
        names = [t["name"] for t in tools["result"]["tools"]]
        if "rlm_query" not in names:
            raise RuntimeError(f"rlm-mcp listed {names}, not rlm_query")
        return elapsed
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=READY_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def probes(root: Path) -> dict[str, Callable[[], float]]:
    """The measured commands (the peers' imports only when installed)."""
    python = sys.executable
    # The console script's module, as each layout had it (for before/after runs).
    script = next(m for m in ("rlm_adapters.cli._main", "rlm_adapters.cli._main", "rlm_adapters.cli") if _importable(m))
    found: dict[str, Callable[[], float]] = {
        "python -c pass": lambda: _timed_exit([python, "-c", "pass"]),
        "import rlm_adapters": lambda: _timed_exit([python, "-c", "import rlm_adapters"]),
        "from rlm_adapters import RLM": lambda: _timed_exit([python, "-c", "from rlm_adapters import RLM"]),
        "rlm --help": lambda: _timed_exit([python, "-m", script, "--help"]),
        "rlm-mcp ready": lambda: mcp_ready(root),
    }
    for peer in ("minrlm", "rlmflow"):
        if importlib.util.find_spec(peer) is not None:
            found[f"import {peer}"] = lambda peer=peer: _timed_exit([python, "-c", f"import {peer}"])  # type: ignore[misc]
    return found


def measure(reps: int) -> list[dict[str, Any]]:
    """Every probe `reps` times, interleaved (so a burst of load hits all of them alike); medians."""
    with tempfile.TemporaryDirectory() as folder:
        found = probes(Path(folder))
        times: dict[str, list[float]] = {name: [] for name in found}
        for probe in found.values():
            probe()  # the first start pays for writing bytecode; it is not what a user waits for again
        for _ in range(reps):
            for name, probe in found.items():
                times[name].append(probe())
    floor = statistics.median(times["python -c pass"])
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        target = TARGETS.get(name)
        rows.append(
            {
                "name": name,
                "median": median,
                "min": min(values),
                "over_floor": median - floor,
                "target": target,
                "met": None if target is None else median <= target,
            }
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    """The table."""
    lines = [f"{'start-up':<29} {'median':>9} {'best':>9} {'- python':>9}  target", "-" * 70]
    for row in rows:
        target = "" if row["target"] is None else f"<= {row['target']:g} s: {'MET' if row['met'] else 'MISSED'}"
        lines.append(
            f"{row['name']:<29} {row['median'] * 1000:>6.0f} ms {row['min'] * 1000:>6.0f} ms "
            f"{row['over_floor'] * 1000:>6.0f} ms  {target}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit status 1 when a probe failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=7, help="starts per probe whose median is reported (default 7)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    rows = measure(args.reps)
    print(render(rows))
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _importable(module: str) -> bool:
    """Whether `module` exists here (a dotted name under a plain module is not an error, only absent)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False
