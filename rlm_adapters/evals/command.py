"""The `rlm eval` subcommand: argparse wiring, live progress on stderr, the final table and reports.

`add_parser(subparsers)` registers it on the `rlm` command's subparsers; the model is configured exactly as
for `rlm ask` (flags, or ``RLM_MODEL`` / ``OPENAI_BASE_URL`` / the provider's key), through
`rlm_adapters.settings.model_options`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from rlm_adapters.errors import ConfigurationError, RLMError
from rlm_adapters.evals.arms import ARM_NAMES, ModelSetup, parse_arms
from rlm_adapters.evals.report import render_table, summarize, write_reports
from rlm_adapters.evals.runner import EvalPlan, Record, generate_all, run_eval
from rlm_adapters.evals.tasks import TASK_NAMES, Instance, Task, make_task
from rlm_adapters.evals.tokens import parse_lengths
from rlm_adapters.settings import BACKEND_HELP, CLI_BACKENDS, credentials_problem, model_options

SetupFactory = Callable[..., ModelSetup]
DESCRIPTION = (
    "Run the RLM paper's long-context tasks at chosen lengths, RLM against its baselines, and report score, "
    "cost and time per arm. Results go to OUT/results.jsonl as they finish; rerunning the same command "
    "resumes where it stopped."
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on an argparse subparsers object; its ``func`` is `handle`.

    Args:
        subparsers: What ``ArgumentParser.add_subparsers()`` returned.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval", help="evaluate RLM against baselines on long-context tasks", description=DESCRIPTION
    )
    parser.add_argument("task", choices=TASK_NAMES, help="the task family")
    parser.add_argument("--model", help="root model (default: $RLM_MODEL)")
    parser.add_argument("--sub-model", help="sub-model (default: $RLM_SUB_MODEL, else the root model)")
    parser.add_argument("--backend", choices=CLI_BACKENDS, help=BACKEND_HELP)
    parser.add_argument("--base-url", help="an OpenAI-compatible server (default: $OPENAI_BASE_URL)")
    parser.add_argument(
        "--lengths", default="8k,32k,131k", help="context lengths in tokens, 8k = 8192 (default: 8k,32k,131k)"
    )
    parser.add_argument("--n", type=int, default=25, help="instances per length (default: 25)")
    parser.add_argument(
        "--arms", default="direct,rlm", help=f"comma-separated, of {', '.join(ARM_NAMES)} (default: direct,rlm)"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: ./rlm-eval/TASK)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    parser.add_argument("--data-dir", type=Path, help="CodeQA items (default: the shared data folder)")
    parser.add_argument("--environment", default="subprocess", help="RLM sandbox kind (default: subprocess)")
    parser.add_argument("--concurrency", type=int, default=4, help="instances in flight (default: 4)")
    parser.add_argument("--context-window", type=int, help="root model window in tokens (direct, compaction)")
    parser.add_argument("--max-iterations", type=int, help="RLM root turns per instance")
    parser.add_argument("--timeout", type=float, help="RLM wall seconds per instance")
    parser.add_argument("--max-cost", type=float, help="RLM money cap per instance")
    parser.set_defaults(func=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Run `rlm eval` with parsed arguments; the exit status."""
    return run_command(args)


def _rlm_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {"max_iterations": args.max_iterations, "timeout": args.timeout, "max_cost": args.max_cost}
    return {key: value for key, value in pairs.items() if value is not None}


def run_command(
    args: argparse.Namespace, *, make_setup: SetupFactory | None = None, console: Console | None = None
) -> int:
    """`handle` with injectable pieces (tests pass a factory building scripted models).

    Args:
        args: The parsed arguments.
        make_setup: Builds the `ModelSetup` from `model_options` output and settings.
        console: Where the final table goes (default: stdout).
    """
    errors = Console(stderr=True, soft_wrap=True)  # one unwrapped line when stderr is a pipe or a file
    try:
        if args.n < 1 or args.concurrency < 1:
            raise ConfigurationError(f"--n and --concurrency must be >= 1, got {args.n!r} and {args.concurrency!r}")
        lengths = parse_lengths(args.lengths)
        arms = parse_arms(args.arms)
        options = model_options(
            model=args.model, sub_model=args.sub_model, backend=args.backend, base_url=args.base_url
        )
        problem = credentials_problem(options) if make_setup is None else None
        if problem is not None:
            raise ConfigurationError(problem)
        task = make_task(args.task, args.data_dir)
        setup = (make_setup or ModelSetup.from_options)(
            options,
            environment=args.environment,
            context_window=args.context_window,
            rlm_kwargs=_rlm_kwargs(args),
        )
    except (RLMError, ValueError) as exc:
        errors.print(f"rlm eval: {exc}", markup=False)
        return 2
    out = args.out or Path("rlm-eval") / args.task
    plan = EvalPlan(lengths=lengths, n=args.n, arms=arms, seed=args.seed, out=out, concurrency=args.concurrency)
    meta = {
        "task": args.task,
        "model": setup.root.model_name,
        "sub_model": setup.sub.model_name if setup.sub else None,
        "lengths": lengths,
        "n": args.n,
        "arms": arms,
        "seed": args.seed,
        "environment": args.environment,
    }
    try:
        with errors.status(f"generating {args.task} instances"):
            instances = generate_all(task, plan)
        records = asyncio.run(_run_with_progress(task, setup, plan, instances, errors))
    except KeyboardInterrupt:
        errors.print(f"interrupted: finished instances are in {out}/results.jsonl; rerun to resume")
        return 130
    paths = write_reports(records, out, meta)
    output = console or Console()
    output.print(render_table(summarize(records)))
    for name, path in paths.items():
        output.print(f"{name}: {path}", markup=False)
    return 0


async def _run_with_progress(
    task: Task, setup: ModelSetup, plan: EvalPlan, instances: list[Instance], errors: Console
) -> list[Record]:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=errors,
        transient=False,
    )
    bars: dict[str, TaskID] = {}
    scores: dict[str, list[float]] = {arm: [] for arm in plan.arms}

    def on_start(done: int, total: int) -> None:
        for arm in plan.arms:
            bars[arm] = progress.add_task(arm, total=len(instances))
        if done:
            errors.print(f"resuming: {done} of {total} already done")

    def on_record(record: Record) -> None:
        arm = record["arm"]
        scores[arm].append(float(record["score"]))
        mean = sum(scores[arm]) / len(scores[arm])
        progress.update(bars[arm], advance=1, description=f"{arm}  score {mean:.2f}")

    with progress:
        try:
            records = await run_eval(task, setup, plan, instances=instances, on_record=on_record, on_start=on_start)
        finally:
            await setup.aclose()
    for arm in plan.arms:
        # Resumed pairs never pass through on_record; show the bars complete.
        progress.update(bars[arm], completed=sum(r["arm"] == arm for r in records))
    return records
