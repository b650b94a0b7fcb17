"""The flags of ``rlm ask``: each default read from `settings.DEFAULTS`, each type naming what is wrong."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rlm_adapters.core import DEFAULTS
from rlm_adapters.core.sandbox import sandbox_kinds
from rlm_adapters.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from rlm_adapters.model_flags import BACKEND_HELP, CLI_BACKENDS


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least `minimum` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}")
        return value

    return parse


def positive(text: str) -> float:
    """An argparse type: a number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that choose the models (`rlm_adapters.model_flags` reads them with the environment)."""
    parser.add_argument("--model", help="root model (default: $RLM_MODEL)")
    parser.add_argument("--sub-model", help="sub-model for llm_query (default: $RLM_SUB_MODEL, else the root model)")
    parser.add_argument("--backend", choices=CLI_BACKENDS, help=BACKEND_HELP)
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")


def add_ask_flags(ask: argparse.ArgumentParser) -> None:
    """Give `ask` its question, ``--context`` and every other flag of ``rlm ask``."""
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
    ask.add_argument(
        "--max-bytes",
        type=count(1),
        default=DEFAULT_MAX_BYTES,
        help=f"cap on the bytes --context may read, documents by their text (default: {DEFAULT_MAX_BYTES})",
    )
    ask.add_argument(
        "--max-files",
        type=count(1),
        default=DEFAULT_MAX_FILES,
        help=f"cap on the files --context may match (default: {DEFAULT_MAX_FILES})",
    )
    add_model_flags(ask)
    ask.add_argument(
        "--environment",
        default=DEFAULTS.environment,
        choices=sandbox_kinds(),
        help=f"sandbox for the model's code (default: {DEFAULTS.environment})",
    )
    ask.add_argument(
        "--max-depth",
        type=count(0),
        default=DEFAULTS.max_depth,
        help=f"levels of nested rlm_query (default: {DEFAULTS.max_depth})",
    )
    ask.add_argument(
        "--max-iterations",
        type=count(1),
        default=DEFAULTS.max_iterations,
        help=f"root model turns (default: {DEFAULTS.max_iterations})",
    )
    ask.add_argument("--timeout", type=positive, default=DEFAULTS.limits.timeout, help="wall-clock limit in seconds")
    ask.add_argument("--max-cost", type=positive, default=DEFAULTS.limits.max_cost, help="money limit in USD")
    ask.add_argument("--log-dir", default=None, help="write the trajectory JSONL here")
    ask.add_argument("--html", default=None, metavar="FILE", help="write the trajectory as an HTML page")
    ask.add_argument(
        "--json", action="store_true", help="print the whole result as JSON (with its sources and checked claims)"
    )
    ask.add_argument(
        "--sources",
        action="store_true",
        help="after the answer, list the lines it comes from (path:start-end) and the claims no input read holds",
    )
    ask.add_argument(
        "--cache",
        metavar="FILE",
        help="keep every model reply in this SQLite file: the same command run again replays the calls that "
        "finished and pays only for the rest (default: $RLM_CACHE)",
    )
    ask.add_argument("--no-cache", action="store_true", help="no call cache, even when RLM_CACHE is set")
    ask.add_argument(
        "--no-document-cache",
        action="store_true",
        help="convert documents afresh and keep no conversion on disk (default: kept by content hash in "
        "$RLM_DOCUMENT_CACHE, else ~/.cache/rlm-adapters/documents; RLM_DOCUMENT_CACHE=off does the same)",
    )
    ask.add_argument(
        "--schema",
        metavar="FILE.json",
        help="a JSON schema the answer must match: the value is validated and printed as JSON",
    )
    ask.add_argument("--verbose", "-v", action="store_true", help="print every iteration to stderr")
    ask.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    ask.add_argument(
        "--raw",
        action="store_true",
        help="print the answer unescaped (control characters included); only when stdout is not a terminal",
    )
