"""The `rlm eval` subcommand: argparse wiring, live progress on stderr, the final table and reports.

`add_parser(subparsers)` registers it on the `rlm` command's subparsers; the model is configured exactly as
for `rlm ask` (flags, or ``RLM_MODEL`` / ``OPENAI_BASE_URL`` / the provider's key), through
`rlm_adapters.model_flags.model_options`. ``rlm eval reproduce --table1`` runs the paper's Table 1 rows this
harness can run (`rlm_adapters.evals.table1`).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from rlm_adapters._terminal import escape_controls, safe_text
from rlm_adapters.core import PriceTable
from rlm_adapters.core.adapter_kit import DEFAULTS
from rlm_adapters.core.cache import SQLiteCallCache
from rlm_adapters.errors import CacheError, ConfigurationError, RLMError
from rlm_adapters.evals.arms import ARM_NAMES, ArmName, ModelSetup, parse_arms
from rlm_adapters.evals.report import render_table, summarize, write_reports
from rlm_adapters.evals.runner import EvalPlan, Record, generate_all, run_eval
from rlm_adapters.evals.table1 import RUNNABLE
from rlm_adapters.evals.table1 import report as table1_report
from rlm_adapters.evals.tasks import TASK_NAMES, Instance, Task, TaskName, make_task
from rlm_adapters.evals.tasks.codeqa import default_data_dir, inventory
from rlm_adapters.evals.tokens import format_length, parse_lengths
from rlm_adapters.evals.windows import known_window
from rlm_adapters.flags import add_model_flags, add_option_flags, option_values, unpriced_lines
from rlm_adapters.model_flags import credentials_problem, model_options

SetupFactory = Callable[..., ModelSetup]
DESCRIPTION = (
    "Run the RLM paper's long-context tasks at chosen lengths, RLM against its baselines, and report score, "
    "cost and time per arm. Results go to OUT/results.jsonl as they finish, and every model reply to "
    "OUT/calls.sqlite as it returns: rerunning the same command resumes where it stopped, an instance cut "
    "off mid-run from its first unfinished call. 'rlm eval reproduce --table1' runs the paper's Table 1 rows."
)
CACHE_FILE = "calls.sqlite"
# The paper's settings per task: lengths (Figure 1 / Table 1) and instances per length.
PAPER_LENGTHS: dict[TaskName, str] = {
    "sniah": "8k,16k,32k,64k,131k,262k",
    "oolong": "131k",
    "oolong-pairs": "32k",
    "codeqa": "",  # the model's window (a label, and the truncation limit with --truncate)
}
PAPER_N: dict[TaskName, int] = {"sniah": 50, "oolong": 50, "oolong-pairs": 20, "codeqa": 50}
TABLE1_ARMS = "direct,compaction,rlm,rlm-depth0"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on an argparse subparsers object; its ``func`` is `handle`.

    Args:
        subparsers: What ``ArgumentParser.add_subparsers()`` returned.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval", help="evaluate RLM against baselines on long-context tasks", description=DESCRIPTION
    )
    parser.add_argument("task", choices=(*TASK_NAMES, "reproduce"), help="the task family, or 'reproduce'")
    add_model_flags(parser)
    parser.add_argument("--compaction-model", help="the model that writes compaction notes (default: the root model)")
    parser.add_argument("--lengths", help="context lengths in tokens (8k = 8192; default: the paper's for the task)")
    parser.add_argument("--n", type=int, help="instances per length (default: the paper's: 50, OOLONG-Pairs 20)")
    parser.add_argument("--arms", help=f"comma-separated: {', '.join(ARM_NAMES)} (default: direct,rlm)")
    parser.add_argument("--out", type=Path, help="output folder (default: ./rlm-eval/TASK)")
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    parser.add_argument("--data-dir", type=Path, help="CodeQA items, or exported oolong-synth rows for oolong")
    parser.add_argument("--truncate", action="store_true", help="codeqa: cut direct prompts to the length (LongBench)")
    parser.add_argument("--list", action="store_true", help="codeqa: list the items with their lengths, and stop")
    parser.add_argument("--table1", action="store_true", help="with 'reproduce': the paper's Table 1")
    parser.add_argument(
        "--oolong-rows", type=Path, help="with 'reproduce': exported oolong-synth rows for OOLONG (default: generated)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="instances in flight (default: 4)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each instance per arm, each a new sample: the report gives a 95%% bootstrap interval over "
        "instances and repeats and the spread across one instance's repeats (default: 1)",
    )
    parser.add_argument("--context-window", type=int, help="root model window in tokens (default: known models' table)")
    # The RLM arms' options, per instance: rlm ask's flags, each unset unless given (the engine's defaults).
    add_option_flags(parser, unset=True)
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help=f"keep no call cache in the output folder (OUT/{CACHE_FILE}): a killed instance starts over",
    )
    parser.set_defaults(func=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Run `rlm eval` with parsed arguments; the exit status."""
    return run_command(args)


def _rlm_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The RLM options given as flags; the wall clock under its field's name, ``timeout``, as results written
    before ``--run-timeout`` were keyed (a resumed evaluation finds them) and the reference arm reads it."""
    given = {k: v for k, v in option_values(args).items() if v is not None and k != "environment"}
    if "run_timeout" in given:
        given["timeout"] = given.pop("run_timeout")
    return given


def _setup(
    args: argparse.Namespace, make_setup: SetupFactory | None, arms: Sequence[ArmName], errors: Console
) -> ModelSetup:
    options = model_options(model=args.model, sub_model=args.sub_model, backend=args.backend, base_url=args.base_url)
    problem = credentials_problem(options) if make_setup is None else None
    if problem is not None:
        raise ConfigurationError(problem)
    extra: dict[str, Any] = {}
    if args.prices:  # the baselines' price table; the RLM arms get theirs with the other flags (rlm_kwargs)
        extra["prices"] = PriceTable(args.prices)
    if args.compaction_model:
        extra["compaction_options"] = model_options(
            model=args.compaction_model, backend=args.backend, base_url=args.base_url
        )
    window = args.context_window or known_window(options["backend_kwargs"]["model_name"])
    if args.context_window is not None and args.context_window < 1024:
        raise ConfigurationError(f"--context-window {args.context_window!r} must be at least 1024 tokens")
    if args.max_cost is not None:  # before the first call: a cost cap cannot see an unpriced model's spend
        others = options.get("other_backend_kwargs", [])
        named = [options["backend_kwargs"]["model_name"], *(kwargs["model_name"] for kwargs in others)]
        for line in unpriced_lines(named, args.prices):
            errors.print(safe_text(f"rlm eval: {line}", one_line=True))
    setup = (make_setup or ModelSetup.from_options)(
        options,
        environment=args.environment or DEFAULTS.environment,
        context_window=window,
        rlm_kwargs=_rlm_kwargs(args),
        **extra,
    )
    if "compaction" in arms:
        setup.threshold  # noqa: B018 - raises, naming --context-window, before anything runs
    return setup


def _lengths(task: TaskName, args: argparse.Namespace, setup: ModelSetup) -> list[int]:
    if args.lengths:
        return parse_lengths(args.lengths)
    if task == "codeqa":
        return [setup.context_window or 272_000]
    return parse_lengths(PAPER_LENGTHS[task])


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
    output = console or Console()
    try:
        if args.task == "reproduce":
            return _reproduce(args, make_setup, output, errors)
        if args.list:
            return _list(args, output)
        if args.table1:
            raise ConfigurationError("--table1 goes with 'rlm eval reproduce'")
        n = args.n or PAPER_N[args.task]
        if n < 1 or args.concurrency < 1:
            raise ConfigurationError(f"--n and --concurrency must be >= 1, got {n!r} and {args.concurrency!r}")
        _check_repeats(args)
        arms = parse_arms(args.arms or "direct,rlm")
        task = make_task(args.task, args.data_dir, truncate=args.truncate)  # the data is checked before any client
        setup = _setup(args, make_setup, arms, errors)
        lengths = _lengths(args.task, args, setup)
        out = args.out or Path("rlm-eval") / args.task
        setup.cache = _cache(args, out)
    except (RLMError, ValueError) as exc:
        errors.print(safe_text(f"rlm eval: {exc}", one_line=True))
        return 2
    plan = EvalPlan(
        lengths=lengths, n=n, arms=arms, seed=args.seed, out=out, concurrency=args.concurrency, repeats=args.repeats
    )
    try:
        [records] = _run([(task, plan)], setup, errors)
    except KeyboardInterrupt:
        errors.print(safe_text(f"interrupted: finished instances are in {out}/results.jsonl; rerun to resume"))
        return 130
    paths = write_reports(records, out, _meta(args.task, setup, plan))
    output.print(render_table(summarize(records), title=f"rlm eval {args.task}"))
    for name, path in paths.items():
        output.print(safe_text(f"{name}: {path}"))
    return 0


def _check_repeats(args: argparse.Namespace) -> None:
    if args.repeats < 1:
        raise ConfigurationError(f"--repeats must be a whole number >= 1 (runs of each instance), got {args.repeats}")


def _cache(args: argparse.Namespace, out: Path) -> SQLiteCallCache | None:
    """The call cache in the output folder (None with ``--no-cache``).

    Raises:
        ConfigurationError: naming ``--out`` when the file there is not a call cache (it is left as it is).
    """
    if args.no_cache:
        return None
    try:
        out.mkdir(parents=True, exist_ok=True)
        return SQLiteCallCache(out / CACHE_FILE)
    except CacheError as exc:
        raise ConfigurationError(
            f"--out {str(out)!r}: {exc.path!r} {exc.reason}; it was left as it is: give another --out, or --no-cache"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"--out {str(out)!r} cannot be made: {exc.strerror}") from None


def _meta(name: str, setup: ModelSetup, plan: EvalPlan) -> dict[str, Any]:
    return {
        "task": name,
        **setup.settings(),
        "lengths": list(plan.lengths),
        "n": plan.n,
        "arms": list(plan.arms),
        "seed": plan.seed,
        "repeats": plan.repeats,
    }


Job = tuple[Task, EvalPlan]


def _run(jobs: Sequence[Job], setup: ModelSetup, errors: Console) -> list[list[Record]]:
    """Run each (task, plan) in turn in one event loop (the clients live in it), then close the clients."""

    async def drive() -> list[list[Record]]:
        results = []
        try:
            for task, plan in jobs:
                with errors.status(f"generating {task.name} instances"):
                    instances = generate_all(task, plan)
                results.append(await _run_with_progress(task, setup, plan, instances, errors))
        finally:
            await setup.aclose()
        return results

    return asyncio.run(drive())


def _list(args: argparse.Namespace, output: Console) -> int:
    if args.task != "codeqa":
        raise ConfigurationError(f"--list lists CodeQA's items; {args.task!r} generates its instances")
    folder = args.data_dir or default_data_dir()
    if folder is None or not folder.is_dir():
        raise ConfigurationError("codeqa needs its data: pass --data-dir with the LongBench v2 CodeQA items")
    found = inventory(folder)
    table = Table(title=safe_text(f"CodeQA items in {folder}"), caption="tokens: the context in o200k_base")
    table.add_column("item", min_width=len("sample_000_hard_medium"), no_wrap=True)
    for header in ("difficulty", "length", "answer", "bytes", "tokens"):
        table.add_column(header, justify="right" if header in ("bytes", "tokens") else "left")
    for item, size, tokens in found.items:
        cells = (item.stem, item.difficulty, item.bucket, item.answer, f"{size:,}", f"{tokens:,}")
        table.add_row(*(safe_text(cell, one_line=True) for cell in cells))
    output.print(table)
    output.print(
        safe_text(
            f"{len(found.items)} of {len(found.items) + found.missing} LongBench v2 code-repository items present; "
            f"{found.missing} missing" + (f": {', '.join(found.missing_known)}" if found.missing_known else "")
        )
    )
    return 0


def _reproduce(args: argparse.Namespace, make_setup: SetupFactory | None, output: Console, errors: Console) -> int:
    if not args.table1:
        raise ConfigurationError("'rlm eval reproduce' needs --table1 (the one table it reproduces)")
    arms = parse_arms(args.arms or TABLE1_ARMS)
    _check_repeats(args)
    out = args.out or Path("rlm-eval") / "table1"
    tasks: list[tuple[Task, int]] = []
    notes: list[str] = []
    for name, _column, length in RUNNABLE:
        data = {"codeqa": args.data_dir, "oolong": args.oolong_rows}.get(name)
        try:
            tasks.append((make_task(name, data, truncate=args.truncate), length))
        except ConfigurationError as exc:
            if data is not None:
                raise  # data the user named and that cannot be used stops the run before anything is paid
            notes.append(f"**{name}** was not run: {exc}")
            errors.print(safe_text(f"{name} is not run: {exc}", one_line=True))
    setup = _setup(args, make_setup, arms, errors)
    setup.cache = _cache(args, out)
    jobs: list[Job] = []
    for task, length in tasks:
        name = task.name
        if name == "codeqa":
            length = setup.context_window or length
        n = min(args.n or PAPER_N[name], PAPER_N[name])
        plan = EvalPlan([length], n, arms, args.seed, out / name, concurrency=args.concurrency, repeats=args.repeats)
        times = f" x {args.repeats} repeats" if args.repeats > 1 else ""
        errors.print(safe_text(f"{name} at {format_length(length)}: up to {n} instances x {len(arms)} arms{times}"))
        jobs.append((task, plan))
    try:
        results = _run(jobs, setup, errors)
    except KeyboardInterrupt:
        errors.print(safe_text(f"interrupted: finished instances are in {out}; rerun to resume"))
        return 130
    records: list[Record] = []
    for (task, plan), task_records in zip(jobs, results, strict=True):
        write_reports(task_records, plan.out, _meta(task.name, setup, plan))
        present = len({r["instance"] for r in task_records})
        if task.name == "codeqa" and present < PAPER_N["codeqa"]:
            notes.append(f"CodeQA ran {present} of the paper's 50 items; the others are missing from the data folder")
        records += task_records
    meta = {
        "model": setup.root.model_name,
        "sub_model": setup.sub.model_name if setup.sub else None,
        "compaction_model": (setup.compactor or setup.root).model_name,
        "context_window": setup.context_window,
        "oolong": f"exported rows from {args.oolong_rows}" if args.oolong_rows else "generated oolong-synth windows",
        "arms": ", ".join(arms),
        "repeats": args.repeats,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / "table1.md"
    path.write_text(table1_report(records, meta, notes), encoding="utf-8")
    output.print(render_table(summarize(records), title="Table 1 rows"))
    output.print(safe_text(f"table1: {path}"))
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
            bars[arm] = progress.add_task(escape(escape_controls(arm)), total=len(instances) * plan.repeats)
        if done:
            errors.print(safe_text(f"resuming: {done} of {total} already done"))

    def on_record(record: Record) -> None:
        arm = record["arm"]
        scores[arm].append(float(record["score"]))
        mean = sum(scores[arm]) / len(scores[arm])
        # Descriptions are rich markup: an arm's name is one of ARM_NAMES, and escaped all the same.
        progress.update(bars[arm], advance=1, description=escape(f"{escape_controls(arm)}  score {mean:.2f}"))

    with progress:
        records = await run_eval(task, setup, plan, instances=instances, on_record=on_record, on_start=on_start)
    for arm in plan.arms:
        # Resumed pairs never pass through on_record; show the bars complete.
        progress.update(bars[arm], completed=sum(r["arm"] == arm for r in records))
    return records
