"""The `rlm view` and `rlm export` subcommands, registered on the CLI's argparse subparsers.

A log that cannot be shown (not a trajectory, or a field of the wrong type: `log_reader.BadLogError`) is refused
in one line on stderr with exit status 2; every message is printed through `escape_controls`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from rlm_adapters._terminal import escape_controls
from rlm_adapters.viewer.export import ExportOptions, ExportStats, Gold, export
from rlm_adapters.viewer.html import write_html
from rlm_adapters.viewer.locate import DEFAULT_LOG_DIR, logs_in, resolve
from rlm_adapters.viewer.terminal import follow, show


def _refuse(command: str, error: Exception) -> int:
    print(f"{command}: {escape_controls(str(error), one_line=True)}", file=sys.stderr)
    return 2


def _resolve_many(targets: list[str], log_dir: str) -> list[Path]:
    paths: list[Path] = []
    for target in targets:
        if Path(target).is_dir():
            paths.extend(logs_in(Path(target)))
        else:
            paths.append(resolve(target, log_dir))
    return paths


def run_view(args: argparse.Namespace) -> int:
    """Handle `rlm view`: the terminal tree, or the HTML page with `--html`."""
    try:
        path = resolve(args.run, args.log_dir)
        if args.html:
            out = write_html(path, args.html)
            print(f"wrote {escape_controls(str(out), one_line=True)}")
            return 0
        console = Console(no_color=True, highlight=False) if args.no_color else Console()
        if args.follow:
            follow(path, console, full=args.full, interval=args.interval)
        else:
            show(path, console, full=args.full)
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as error:  # NotATrajectoryError and BadLogError are ValueErrors
        return _refuse("rlm view", error)
    return 0


def run_export(args: argparse.Namespace) -> int:
    """Handle `rlm export`: write chat-format JSONL from trajectory logs."""
    if args.sub_calls and not args.include_context:
        print(
            "rlm export: sub-call prompts are pieces of the context; add --include-context to export them",
            file=sys.stderr,
        )
        return 2
    try:
        paths = _resolve_many(args.runs, args.log_dir)
        gold = Gold.read(args.only_correct) if args.only_correct else None
    except (OSError, ValueError) as error:
        return _refuse("rlm export", error)
    # `append` with a list default would add to the default, so "final" is filled in here.
    chosen = args.finish_reason or ["final"]
    reasons = None if "any" in chosen else frozenset(chosen)
    options = ExportOptions(
        finish_reasons=reasons,
        gold=gold,
        match=args.match,
        min_turns=args.min_turns,
        max_turns=args.max_turns,
        sub_calls=args.sub_calls,
        nested=args.nested,
        include_context=args.include_context,
        allow_truncated=args.allow_truncated,
        metadata=args.metadata,
    )
    try:
        if args.output in (None, "-"):
            stats = export(paths, sys.stdout, options)
        else:
            stats = _export_to(Path(args.output), paths, options)
    except (OSError, ValueError) as error:
        return _refuse("rlm export", error)
    skipped = ", ".join(f"{count} {reason}" for reason, count in sorted(stats.skipped.items())) or "none"
    summary = f"{stats.runs} runs read, {stats.kept} kept, {stats.examples} examples; skipped: {skipped}"
    print(f"rlm export: {escape_controls(summary, one_line=True)}", file=sys.stderr)
    return 0


def _export_to(out: Path, paths: list[Path], options: ExportOptions) -> ExportStats:
    """Export into `out` through a temporary file beside it, so a refused log leaves no half-written file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            stats = export(paths, handle, options)
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return stats


def add_parser(subparsers: Any) -> None:
    """Register `view` and `export` on an argparse subparsers object; each sets `func(args) -> int`."""
    view = subparsers.add_parser(
        "view",
        help="show a trajectory log as a tree, or write it as an HTML page",
        description="Show what an RLM did: a .jsonl log, a folder (its newest run) or a trajectory id.",
    )
    view.add_argument("run", help="a .jsonl log, a folder of logs (newest run), or a trajectory id")
    view.add_argument("--log-dir", default=DEFAULT_LOG_DIR, help="where to look up a trajectory id (default ./logs)")
    view.add_argument("--full", action="store_true", help="show every text and sub-call untruncated")
    view.add_argument("--follow", action="store_true", help="keep redrawing while the log is being written")
    view.add_argument("--interval", type=float, default=0.5, help="seconds between looks with --follow")
    view.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML page instead")
    view.add_argument("--no-color", action="store_true", help="plain text output")
    view.set_defaults(func=run_view)

    exp = subparsers.add_parser(
        "export",
        help="write trajectories as chat-format JSONL for fine-tuning",
        description="Root turns become conversations; filter by finish reason, gold answers and turn count.",
        epilog='Gold file (--only-correct): JSON Lines, e.g. {"query": "How many users?", "answer": "42"} or '
        '{"run_id": "3f2c...", "answers": ["42", "forty-two"]}; a run is looked up by its id first, then by its '
        "query; answers are compared lowercased, with spaces collapsed and surrounding quotes and punctuation "
        "dropped; --match exact compares whole answers, contains looks for the gold text in the answer. Runs "
        "with no gold line are skipped.",
    )
    exp.add_argument("runs", nargs="+", help="log files, folders of logs, or trajectory ids")
    exp.add_argument("--format", choices=["sft"], default="sft", help="output format (chat messages JSONL)")
    exp.add_argument("-o", "--output", help="output file (default: standard output)")
    exp.add_argument("--log-dir", default=DEFAULT_LOG_DIR, help="where to look up trajectory ids")
    exp.add_argument(
        "--only-correct",
        metavar="GOLD.jsonl",
        help='keep runs whose answer matches this gold file: one JSON object per line, {"run_id": ID} or '
        '{"query": QUESTION} (or both) with {"answer": TEXT} or {"answers": [TEXT, ...]}',
    )
    exp.add_argument("--match", choices=["exact", "contains"], default="exact", help="gold comparison")
    exp.add_argument(
        "--finish-reason",
        action="append",
        default=None,
        metavar="REASON",
        help="keep runs that ended this way (repeatable; 'any' keeps all; default: final)",
    )
    exp.add_argument("--min-turns", type=int, help="keep runs with at least this many root turns")
    exp.add_argument("--max-turns", type=int, help="keep runs with at most this many root turns")
    exp.add_argument("--sub-calls", action="store_true", help="also write each llm_query as an example")
    exp.add_argument("--nested", action="store_true", help="also write nested RLM runs' conversations")
    exp.add_argument("--include-context", action="store_true", help="keep context text (previews, printed context)")
    exp.add_argument("--allow-truncated", action="store_true", help="keep conversations the log cut")
    exp.add_argument("--metadata", action="store_true", help="add a metadata object to each line")
    exp.set_defaults(func=run_export)
