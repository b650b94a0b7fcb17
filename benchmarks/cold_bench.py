"""A cold start side by side (issue 53): ``python -m benchmarks.cold_bench [--rounds 3] [--json FILE]``.

What every ``rlm ask`` and every new worker pays: a fresh interpreter, from before the library's import to
the answer. Each library runs in a virtualenv of its own (created here, under ``~/.cache/rlm-adapters/
cold-bench``, by pip as a user's install leaves it, bytecode compiled), in a fresh process per run, against
one fake OpenAI server in this process. The run: a root turn whose code sends 64 sub-calls at once
(``llm_query_batched``, each of the peers' own batch call), then a root turn with the answer; every request
waits 0.5 s, so three round trips are 1.5 s of each run. The server checks every run made 2 root and 64
leaf requests. Libraries are alternated (the order turns each round), ``--rounds`` rounds after one untimed
pass of each (so every arm finds its files in the page cache); the medians are reported, with each phase:
the import, the construction (a peer whose import loads the SDK pays it there) and the run.

Arms: rlm-adapters with its default sandbox and with ``environment="local"`` (from ``--source``, default
this checkout), and the peers pinned by the ``bench`` extra: rlmflow 0.3.2 (``max_concurrency`` 64),
minrlm 0.1.5, rlms 0.1.3 (the reference, its defaults: local REPL, 16 sub-calls in flight).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.server import PARENT_MARKER, BenchServer, Script, batched, final

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlm-adapters" / "cold-bench"
SUB_CALLS = 64
LATENCY = 0.5
RUN_TIMEOUT = 120.0
QUESTION = f"{PARENT_MARKER}: answer the question."
CONTEXT = "A small parent context for the cold-start benchmark. " * 8


def _fan_out_turn(side: Any) -> str:
    prompts = f"[f'item {{i}}: the magic number is {{1000 + i}}' for i in range({SUB_CALLS})]"
    return f"answers = {batched(side, prompts)}\nprint(len(answers))"


SCRIPT = Script((_fan_out_turn, lambda side: final(side, "str(len(answers))")))

# Each arm's program: `T` holds perf_counter stamps before the import, after it, after construction, after the
# run; the answer and the stamps go to stdout as one JSON line. URL and CONTEXT come from the environment.
_PROLOGUE = (
    "import json, os, time\nT = [time.perf_counter()]\n"
    "URL, CONTEXT = os.environ['BENCH_URL'], os.environ['BENCH_CONTEXT']\n"
)
_EPILOGUE = "T.append(time.perf_counter())\nprint(json.dumps({'answer': str(answer), 'stamps': T}))\n"
_OURS = """from rlm_adapters import RLM
T.append(time.perf_counter())
kw = dict(base_url=URL, api_key='bench', max_retries=0)
rlm = RLM(backend='openai', backend_kwargs=dict(model_name='root-model', **kw), other_backends=['openai'],
          other_backend_kwargs=[dict(model_name='leaf-model', **kw)], max_iterations=10{environment})
T.append(time.perf_counter())
answer = rlm.completion(CONTEXT, QUESTION).response
"""
PROGRAMS: dict[str, str] = {
    "rlm-adapters, default sandbox": _OURS.format(environment=""),
    "rlm-adapters, environment=local": _OURS.format(environment=", environment='local'"),
    "rlmflow": """from rlmflow import OpenAIClient, RLMConfig, RLMFlow
from rlmflow.runtime.local import LocalRuntime
T.append(time.perf_counter())
client = OpenAIClient('root-model', base_url=URL, api_key='bench', max_retries=0)
flow = RLMFlow(llm_client=client, runtime=LocalRuntime(), config=RLMConfig(max_depth=1, max_iterations=10,
               max_concurrency=64))
T.append(time.perf_counter())
answer = flow.run(QUESTION, context=CONTEXT)
""",
    "minrlm": """from minrlm import RLM
T.append(time.perf_counter())
rlm = RLM(model='root-model', base_url=URL, api_key='bench', max_iterations=10)
T.append(time.perf_counter())
answer = rlm.completion(QUESTION, CONTEXT).response
""",
    "rlms": """from rlm import RLM
T.append(time.perf_counter())
kw = dict(base_url=URL, api_key='bench', max_retries=0)
rlm = RLM(backend='openai', backend_kwargs=dict(model_name='root-model', **kw), other_backends=['openai'],
          other_backend_kwargs=[dict(model_name='leaf-model', **kw)], environment='local', max_depth=1,
          max_iterations=10)
T.append(time.perf_counter())
answer = rlm.completion(CONTEXT, root_prompt=QUESTION).response
""",
}
# arm -> what its virtualenv installs (ours: the source tree). rlmflow imports openai only in its OpenAIClient
# and does not require it: it gets the release pip picks for the others.
PEER_REQUIREMENTS = {"rlmflow": ("rlmflow==0.3.2", "openai"), "minrlm": ("minrlm==0.1.5",), "rlms": ("rlms==0.1.3",)}


@dataclass(frozen=True)
class Arm:
    """One library in its own virtualenv."""

    name: str
    python: Path
    env: tuple[tuple[str, str], ...] = ()  # more environment (the tests point an arm at this checkout)
    program_name: str = ""  # the arm's program in `PROGRAMS` (default: its name)

    def program(self) -> str:
        """The timed program, with the question filled in."""
        body = PROGRAMS[self.program_name or self.name].replace("QUESTION", repr(QUESTION))
        return _PROLOGUE + body + _EPILOGUE


def _run(command: list[str], **kwargs: Any) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, **kwargs)


def _virtualenv(name: str, requirements: tuple[str, ...], stamp: str) -> Path:
    """A virtualenv holding `requirements`, made once per `stamp`, its bytecode compiled; returns its python."""
    folder = CACHE / name
    python = folder / "bin" / "python"
    marker = folder / ".installed"
    if marker.exists() and marker.read_text() == stamp:
        return python
    shutil.rmtree(folder, ignore_errors=True)
    print(f"... making the {name} virtualenv ({' '.join(requirements)})", file=sys.stderr, flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    _run([str(python), "-m", "pip", "install", "--quiet", *requirements])
    # pip compiles what it installs; compileall makes sure of it for every module (quiet, at most once each).
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    _run([str(python), "-m", "compileall", "-q", "-j", "0", site])
    marker.write_text(stamp)
    return python


def _source_stamp(source: Path) -> str:
    """A digest of the source tree's package files and pyproject (a changed tree gets a fresh install)."""
    digest = hashlib.sha256()
    for path in sorted([source / "pyproject.toml", *(source / "rlm_adapters").rglob("*")]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(source)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _ours(source: Path) -> Path:
    stamp = _source_stamp(source)
    return _virtualenv(f"rlm-adapters-{stamp[:12]}", (str(source),), stamp)


def make_arms(source: Path, only: list[str], baseline: Path | None = None) -> list[Arm]:
    """Every arm's virtualenv (made or reused); with `baseline`, our arms from that tree too ("(before)")."""
    arms: list[Arm] = []
    for name in PROGRAMS:
        if only and not name.startswith(tuple(only)):
            continue
        if name.startswith("rlm-adapters"):
            arms.append(Arm(name, _ours(source)))
            if baseline is not None:
                arms.append(Arm(f"{name} (before)", _ours(baseline), program_name=name))
        else:
            requirements = PEER_REQUIREMENTS[name]
            arms.append(Arm(name, _virtualenv(name, requirements, " ".join(requirements))))
    return arms


def run_once(server: BenchServer, arm: Arm, scratch: Path, latency: float = LATENCY) -> dict[str, Any]:
    """One cold run of `arm` in a fresh interpreter; its phases in seconds, checked against the server."""
    server.use(SCRIPT, latency)
    env = {
        **dict(arm.env),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(scratch),  # no user configuration, no caches of ours carried from one run to the next
        "BENCH_URL": server.base_url,
        "BENCH_CONTEXT": CONTEXT,
    }
    done = subprocess.run(
        [str(arm.python), "-c", arm.program()],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    counts = server.counts()
    if done.returncode != 0:
        raise RuntimeError(f"{arm.name} failed: {done.stderr.strip()[-2000:]}")
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    if counts["root_requests"] != 2 or counts["leaf_requests"] != SUB_CALLS:
        raise RuntimeError(f"{arm.name}: expected 2 root + {SUB_CALLS} leaf requests, the server saw {counts}")
    if reply["answer"].strip() != str(SUB_CALLS):
        raise RuntimeError(f"{arm.name} answered {reply['answer']!r}, not {SUB_CALLS}")
    start, imported, built, answered = reply["stamps"]
    return {
        "seconds": answered - start,
        "import": imported - start,
        "construction": built - imported,
        "run": answered - built,
    }


def measure(arms: list[Arm], rounds: int) -> dict[str, list[dict[str, Any]]]:
    """One untimed pass, then `rounds` rounds alternating the arms (the order turns each round)."""
    runs: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in arms}
    with BenchServer() as server, tempfile.TemporaryDirectory(prefix="rlm-cold-") as scratch:
        for arm in arms:
            run_once(server, arm, Path(scratch))
        for round_ in range(rounds):
            shift = round_ % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                runs[arm.name].append(run_once(server, arm, Path(scratch)))
                print(f"    {arm.name}: {runs[arm.name][-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    return runs


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """The markdown table: median seconds, each phase's range, and the ratio to the fastest peer's median."""
    medians = {name: statistics.median(r["seconds"] for r in rows) for name, rows in runs.items()}
    peers = [m for name, m in medians.items() if not name.startswith("rlm-adapters")]
    fastest = min(peers) if peers else None
    lines = [
        "| library | seconds | x fastest peer | import | construction | run |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(runs, key=medians.__getitem__):
        rows = runs[name]
        phases = ("import", "construction", "run")
        spans = [f"{min(r[k] for r in rows):.2f}-{max(r[k] for r in rows):.2f}" for k in phases]
        ratio = f"{medians[name] / fastest:.2f}" if fastest else "-"
        lines.append(f"| {name} | {medians[name]:.2f} | {ratio} | {' | '.join(spans)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Make the virtualenvs, run the rounds, print the table (and write the runs as JSON)."""
    parser = argparse.ArgumentParser(description="Cold start side by side (issue 53).")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of every arm (default 3)")
    parser.add_argument("--source", type=Path, default=ROOT, help="the rlm-adapters source tree to install")
    parser.add_argument("--only", action="append", default=[], help="run the arms whose name starts so")
    parser.add_argument("--baseline", type=Path, help="another rlm-adapters tree, run beside --source (before/after)")
    parser.add_argument("--json", type=Path, help="write every run's phases here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    arms = make_arms(args.source.resolve(), args.only, args.baseline.resolve() if args.baseline else None)
    load = os.getloadavg()
    runs = measure(arms, args.rounds)
    print(table(runs))
    print(f"\nload average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
