"""What `rlm ask --sources` costs a user, end to end: the same run with and without it, side by side.

``--shape oneline lines repetitive binary quoting`` runs it over one file of each shape instead (`benchmarks.shapes`:
real text on one line or many, a log, binary-ish text, an answer quoting 45 passages), the root model mapping 16
chunks of 200,000 characters to sub-models; the row says the overhead against the issue's goal (1.5 s or 25% of
the plain run, whichever is larger) and when the answer reached stdout in each arm.

Run as ``python -m benchmarks.ask_sources_bench [--mb 16 64 200] [--reps 3] [--environment local]``. Each
size writes a generated tree (`benchmarks.tree`: files of about 10 KB, rollout passwords planted at known
lines; ``--tree hard``: 400 files of random 12-word lines from a 30,000-word vocabulary) and runs the real `rlm`
console script over it against a local OpenAI-compatible server whose root
model greps the tree, asks a sub-model about each hit and answers with the codes (what the planted tests'
root does). The two arms alternate run by run (``plain``, ``--sources``, ``plain``, ...) so load on the
machine falls on both alike. Reported per size: the median wall time and CPU time (of the `rlm` process
and its sandbox) of each arm, the difference and the ratio. Every run's answer, and every ``--sources``
run's citations, are checked against the tree: a row whose runs answer wrongly is an error, not a number.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.shapes import CHUNK, CHUNKS, SHAPES, Shape, make_input, simulate
from benchmarks.tree import ANSWER_TURN, Tree, make_tree
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root

QUESTION = "What are the rollout passwords?"
FIND = """```repl
hits = []
for d in context:
    for line in d["text"].splitlines():
        if "rollout password" in line:
            hits.append(line.strip())
print(len(hits))
```"""
ARMS = ("plain", "--sources")


@dataclass(frozen=True)
class Timing:
    """One run of `rlm ask`: its wall time and the CPU time of the process tree (s)."""

    wall: float
    cpu: float


def rlm_command() -> list[str]:
    """The `rlm` console script beside this interpreter (the installed one), or ``python -m``."""
    script = shutil.which("rlm", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "rlm_adapters"]


def run_once(command: list[str], folder: Path, env: dict[str, str]) -> tuple[Timing, str]:
    """Run `command` in `folder`; its timing and standard output (an error if it failed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu), done.stdout


def check(tree: Tree, arm: str, stdout: str) -> None:
    """Raise unless the run answered with the tree's codes and (``--sources``) cited exactly its planted lines."""
    expected = "The rollout passwords are " + ", ".join(tree.codes()) + "."
    answer, _, block = stdout.rstrip("\n").partition("\n\n")
    if answer != expected:
        raise RuntimeError(f"the {arm} run answered {answer[:200]!r}, not {expected!r}")
    if arm == "--sources":
        cited = set(block.splitlines()[1:])
        wanted = {f"- {path}:{line}" for path, line in tree.expected()}
        if not block.startswith("Sources:") or cited != wanted:
            raise RuntimeError(f"the --sources run cited {sorted(cited)[:5]}..., not {sorted(wanted)[:5]}...")


def measure(megabytes: float, reps: int, environment: str, kind: str = "friendly") -> dict[str, list[Timing]]:
    """`reps` runs of each arm over a tree of `megabytes` MB (`kind`: see `make_tree`), alternating."""
    tree = make_tree(kind, megabytes)
    timings: dict[str, list[Timing]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAIServer() as server:
        folder = Path(scratch)
        tree.write(folder)
        server.root = scripted_root([FIND, ANSWER_TURN])
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
        env = {**clean, "RLM_MODEL": "root-model", "RLM_SUB_MODEL": "leaf-model", "OPENAI_API_KEY": "bench",
               "OPENAI_BASE_URL": server.base_url}  # fmt: skip
        base = [*rlm_command(), "ask", "--context", "src", "--environment", environment]
        for _ in range(reps):
            for arm in ARMS:
                flags = ["--sources"] if arm == "--sources" else []
                timing, stdout = run_once([*base, *flags, QUESTION], folder, env)
                check(tree, arm, stdout)
                timings[arm].append(timing)
    return timings


def report(megabytes: float, timings: dict[str, list[Timing]]) -> str:
    """One table row: medians of each arm, the difference and the ratio."""
    plain_wall = statistics.median(t.wall for t in timings["plain"])
    cited_wall = statistics.median(t.wall for t in timings["--sources"])
    plain_cpu = statistics.median(t.cpu for t in timings["plain"])
    cited_cpu = statistics.median(t.cpu for t in timings["--sources"])
    return (
        f"| {megabytes:g} MB | {plain_wall:.2f} s | {cited_wall:.2f} s | {cited_wall - plain_wall:+.2f} s "
        f"| {cited_wall / plain_wall:.2f}x | {plain_cpu:.2f} s | {cited_cpu:.2f} s | {cited_cpu - plain_cpu:+.2f} s |"
    )


# A root model that maps over a long text (`benchmarks.shapes`): 16 chunks to sub-models, a slice printed.
MAP = """```repl
size = %(chunk)d
starts = list(range(0, len(context), size))
step = max(1, len(starts) // %(count)d)
picked = starts[::step][:%(count)d]
replies = llm_query_batched([f"Summarize this part of a text.\\n\\n{context[at:at + size]}" for at in picked])
print(context[1000:1300])
```"""


@dataclass(frozen=True)
class ShapeRun:
    """One ``rlm ask`` over a file of a shape: its wall time, when its answer reached stdout, and its output."""

    wall: float
    answered: float
    stdout: str


def run_streamed(command: list[str], folder: Path, env: dict[str, str], answer: str) -> ShapeRun:
    """Run `command`, noting when the first line of `answer` reached its stdout (the answer printed)."""
    started = time.perf_counter()
    answered = float("nan")
    lines: list[str] = []
    first = answer.splitlines()[0]
    with subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None and p.stderr is not None
        for line in p.stdout:
            if line.rstrip("\n") == first and answered != answered:
                answered = time.perf_counter() - started
            lines.append(line)
        error = p.stderr.read()
    wall = time.perf_counter() - started
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({p.returncode}): {error.strip()[-400:]}")
    stdout = "".join(lines)
    if not stdout.startswith(answer):
        raise RuntimeError(f"the run answered {stdout[:200]!r}, not {answer[:200]!r}")
    return ShapeRun(wall, answered, stdout)


def measure_shape(shape: Shape, megabytes: float, reps: int, environment: str) -> dict[str, list[ShapeRun]]:
    """`reps` runs of each arm over a file of `shape` (`benchmarks.shapes`), alternating; --sources must cite."""
    text = make_input(shape, megabytes)
    run = simulate(shape, text)
    timings: dict[str, list[ShapeRun]] = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as scratch, FakeOpenAIServer() as server:
        folder = Path(scratch)
        (folder / "input.txt").write_text(text, encoding="utf-8")
        del text
        final = f"```repl\nanswer = {run.answer!r}\nFINAL_VAR('answer')\n```"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
        env = {**clean, "RLM_MODEL": "root-model", "RLM_SUB_MODEL": "leaf-model", "OPENAI_API_KEY": "bench",
               "OPENAI_BASE_URL": server.base_url}  # fmt: skip
        base = [*rlm_command(), "ask", "--context", "input.txt", "--environment", environment, "--no-cache"]
        for _ in range(reps):
            for arm in ARMS:
                server.root = scripted_root([MAP % {"chunk": CHUNK, "count": CHUNKS}, final])
                flags = ["--sources", "--sources-timeout", "600"] if arm == "--sources" else []
                done = run_streamed([*base, *flags, QUESTION], folder, env, run.answer)
                if arm == "--sources" and "\nSources:\n- input.txt:" not in done.stdout:
                    raise RuntimeError(f"the --sources run cited nothing: {done.stdout[-300:]!r}")
                timings[arm].append(done)
    return timings


def report_shape(shape: str, megabytes: float, timings: dict[str, list[ShapeRun]]) -> str:
    """One row: medians of each arm, the overhead against the goal, and when the answer was printed."""
    plain = statistics.median(t.wall for t in timings["plain"])
    cited = statistics.median(t.wall for t in timings["--sources"])
    answered = statistics.median(t.answered for t in timings["--sources"])
    goal = max(1.5, 0.25 * plain)
    return (
        f"| {shape} | {megabytes:g} MB | {plain:.2f} s | {cited:.2f} s | {cited - plain:+.2f} s | {goal:.2f} s "
        f"| {answered:.2f} s | {answered - statistics.median(t.answered for t in timings['plain']):+.2f} s |"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ask_sources_bench", description=__doc__)
    parser.add_argument("--mb", type=float, nargs="+", default=[16.0, 64.0, 200.0], help="tree sizes (MB)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each arm per size (default 3)")
    parser.add_argument("--environment", default="local", help="the sandbox (default local: the floor)")
    parser.add_argument(
        "--tree", choices=["friendly", "hard"], nargs="+", default=["friendly", "hard"],
        help="friendly: 10 KB files of code, logs and prose; hard: 400 files of random 12-word lines",
    )  # fmt: skip
    parser.add_argument(
        "--shape", nargs="+", choices=SHAPES, help="files of real inputs' shapes (benchmarks.shapes) instead of trees"
    )
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, not {args.reps}")
    if args.shape:
        load = os.getloadavg()[0]
        print(f"`rlm ask` over one file, with and without --sources, median of {args.reps}, load {load:.1f}")
        print("| shape | input | wall plain | wall --sources | diff | goal: 1.5 s or 25% | answer printed | vs plain |")
        print("|---|---|---|---|---|---|---|---|")
        for shape in args.shape:
            for megabytes in args.mb:
                print(report_shape(shape, megabytes, measure_shape(shape, megabytes, args.reps, args.environment)))
        return 0
    print(f"`rlm ask` with and without --sources, median of {args.reps}, environment {args.environment}")
    print("| tree | input | wall plain | wall --sources | wall diff | ratio | CPU plain | CPU --sources | CPU diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in args.tree:
        for megabytes in args.mb:
            row = report(megabytes, measure(megabytes, args.reps, args.environment, kind))
            print(f"| {kind} {row}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
