"""The flags of ``rlm ask``: the options' own built from their declarations (`rlm_adapters.flags`), the
models', and those of reading the context and printing the answer."""

from __future__ import annotations

import argparse

from rlm_adapters.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from rlm_adapters.flags import add_model_flags, add_option_flags, count


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
