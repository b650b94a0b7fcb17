"""The flags of ``rlm ask``: the options' own from their declarations (`core.settings`), each type naming
what is wrong."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rlm_adapters.core import flagged
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


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the `RLM` options that declare one (`core.settings.option(..., flag=...)`): an integer
    option takes a whole number of at least its minimum, a number one above 0, a choice one of its choices.

    An option's older flag (``--timeout`` for ``--run-timeout``) is accepted too; `spelled` says which one a
    command line used, for messages."""
    for declared in flagged():
        cli = declared.option.flag
        assert cli is not None
        default = declared.default
        shown = "" if default is None else f" (default: {default})"
        names = (cli.name, *cli.aliases)
        common: dict[str, Any] = {"dest": declared.name, "default": default, "help": cli.help + shown}
        if cli.aliases:
            common["action"] = _Spelled
        if cli.choices is not None:
            parser.add_argument(*names, choices=cli.choices(), **common)
        elif declared.type.startswith("int"):
            parser.add_argument(*names, type=count(cli.minimum), **common)
        else:
            parser.add_argument(*names, type=positive, **common)


class _Spelled(argparse.Action):
    """Stores the value and which of the option's flags gave it."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, flag: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", flag)


def spelled(args: argparse.Namespace, keyword: str) -> str:
    """The flag a command line set option `keyword` with (its own name when it used none or that)."""
    declared = next(d for d in flagged() if d.name == keyword)
    assert declared.option.flag is not None
    return str(getattr(args, f"{keyword}_flag", None) or declared.option.flag.name)


def option_values(args: argparse.Namespace) -> dict[str, Any]:
    """The `RLM` keywords of the flags `add_option_flags` made, as parsed."""
    return {declared.name: getattr(args, declared.name) for declared in flagged()}


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
    add_option_flags(ask)
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
