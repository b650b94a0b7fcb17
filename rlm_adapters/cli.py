"""The ``rlm`` command: ``rlm ask`` answers a question over files; ``view``, ``export`` and ``eval`` come
from the viewer and evaluation packages.

    rlm ask --context big.log notes/ "Which user ids appear most often?"

The model comes from flags or from ``RLM_MODEL`` / ``RLM_SUB_MODEL`` / ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` (see `rlm_adapters.settings`). The answer goes to stdout; a live progress line and
any diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.status import Status

from rlm_adapters.core.events import Event, RootCall, RunStarted, SubCallFinished
from rlm_adapters.core.files import FileLoadError, PathNotAllowedError, load_paths
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.rlm import RLM
from rlm_adapters.core.trajectory import RLMLogger
from rlm_adapters.errors import RLMError
from rlm_adapters.settings import model_options

# Subcommands contributed by other packages: module -> exposes add_parser(subparsers).
PLUGINS = ("rlm_adapters.viewer.command", "rlm_adapters.evals.command")


class ProgressLine:
    """Keeps one live status line on stderr from the run's events."""

    def __init__(self, status: Status, max_iterations: int) -> None:
        self.status = status
        self.max_iterations = max_iterations
        self.iteration = 0
        self.sub_calls = 0
        self.tokens = 0
        self.cost = 0.0
        self.started = time.perf_counter()

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted) and event.depth == 0:
            self.started = time.perf_counter()
        elif isinstance(event, RootCall):
            if event.depth == 0:
                self.iteration = event.iteration
            self.tokens += event.input_tokens + event.output_tokens
            self.cost += event.cost
        elif isinstance(event, SubCallFinished):
            self.sub_calls += 1
            self.tokens += event.input_tokens + event.output_tokens
            self.cost += event.cost
        self.status.update(self.text())

    def text(self) -> str:
        elapsed = time.perf_counter() - self.started
        return (
            f"iteration {self.iteration}/{self.max_iterations} · {self.sub_calls} sub-calls · "
            f"{self.tokens:,} tokens · ${self.cost:.4f} · {elapsed:.1f} s"
        )


def _read_context(sources: list[str]) -> Any:
    """One file gives its text; several files (or a folder, or a glob) give a list of documents."""
    if sources == ["-"]:
        return sys.stdin.read()
    loaded = load_paths(sources, [Path("/")], base=Path.cwd(), display_base=Path.cwd())
    for skipped in loaded.skipped:
        print(f"rlm: skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if len(loaded.files) == 1 and len(sources) == 1 and Path(sources[0]).is_file():
        return loaded.files[0].text
    return loaded.documents()


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="root model (default: $RLM_MODEL)")
    parser.add_argument("--sub-model", help="sub-model for llm_query (default: $RLM_SUB_MODEL, else the root model)")
    parser.add_argument("--backend", help="openai (default, any OpenAI-compatible server) or anthropic; $RLM_BACKEND")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")


def add_ask_parser(subparsers: Any) -> None:
    """Register ``rlm ask``."""
    ask = subparsers.add_parser("ask", help="answer a question over files far larger than a context window")
    ask.add_argument("question", nargs="?", help="the question to answer")
    ask.add_argument(
        "--context",
        "-c",
        nargs="+",
        action="extend",
        required=True,
        metavar="PATH",
        help="files, folders or globs to reason over ('-' reads stdin)",
    )
    _add_model_flags(ask)
    ask.add_argument(
        "--environment",
        default="subprocess",
        choices=["subprocess", "local", "docker", "e2b", "modal", "prime", "daytona"],
        help="sandbox for the model's code (default: subprocess)",
    )
    ask.add_argument("--max-depth", type=int, default=1)
    ask.add_argument("--max-iterations", type=int, default=30)
    ask.add_argument("--timeout", type=float, help="wall-clock limit in seconds")
    ask.add_argument("--max-cost", type=float, help="money limit in USD")
    ask.add_argument("--log-dir", default=None, help="write the trajectory JSONL here")
    ask.add_argument("--html", default=None, metavar="FILE", help="write the trajectory as an HTML page")
    ask.add_argument("--json", action="store_true", help="print the whole result as JSON")
    ask.add_argument("--verbose", "-v", action="store_true", help="print every iteration to stderr")
    ask.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    ask.set_defaults(func=run_ask)


def run_ask(args: argparse.Namespace) -> int:
    """Handle ``rlm ask``."""
    err = Console(stderr=True)
    if args.question is None:
        # `rlm ask --context a b "question"`: argparse gives the question to --context; take it back.
        if len(args.context) < 2:
            err.print("rlm ask: give a question after the context paths", markup=False)
            return 2
        args.question = args.context.pop()
    if args.question is None:
        # `rlm ask --context a b "question"`: argparse gives the question to --context; take it back.
        if len(args.context) < 2:
            err.print("rlm ask: give a question after the context paths", markup=False)
            return 2
        args.question = args.context.pop()
    try:
        options = model_options(
            model=args.model, sub_model=args.sub_model, backend=args.backend, base_url=args.base_url
        )
        context = _read_context(args.context)
        # --html needs a trajectory: without --log-dir it is written to a temporary folder.
        log_dir = args.log_dir or (tempfile.mkdtemp(prefix="rlm-ask-") if args.html else None)
        rlm = RLM(
            **options,
            environment=args.environment,
            max_depth=args.max_depth,
            max_iterations=args.max_iterations,
            timeout=args.timeout,
            max_cost=args.max_cost,
            logger=RLMLogger(log_dir) if log_dir else None,
            verbose=args.verbose,
        )
    except (RLMError, ValueError, OSError) as exc:
        err.print(f"rlm: {exc}", markup=False, highlight=False)
        return 2
    result = _run_with_progress(rlm, context, args, err)
    if args.html and result.trajectory_file is not None:
        _write_html(result.trajectory_file, Path(args.html), err)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.response)
    if result.finish_reason != "final":
        err.print(
            f"rlm: the run ended with finish_reason={result.finish_reason!r}: {result.error or ''}",
            markup=False,
            highlight=False,
        )
        return 1
    return 0


def _run_with_progress(rlm: RLM, context: Any, args: argparse.Namespace, err: Console) -> RLMResult:
    quiet = args.quiet or args.verbose or not err.is_terminal
    with err.status("starting", spinner="dots") as status:
        callbacks = [] if quiet else [ProgressLine(status, args.max_iterations)]
        return asyncio.run(rlm.acompletion(context, args.question, callbacks=callbacks))


def _write_html(log: Path, out: Path, err: Console) -> None:
    try:
        viewer = importlib.import_module("rlm_adapters.viewer.html")
    except ImportError:
        err.print("rlm: the HTML viewer is not available in this installation", markup=False)
        return
    viewer.write_html(log, out)
    err.print(f"rlm: wrote {out}", markup=False, highlight=False)


def build_parser() -> argparse.ArgumentParser:
    """The ``rlm`` argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="rlm", description="Recursive Language Models from the command line.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_ask_parser(subparsers)
    for name in PLUGINS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("rlm_adapters"):
                continue  # that part is not in this installation
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlm`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (FileLoadError, PathNotAllowedError, RLMError) as exc:
        print(f"rlm: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlm: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
