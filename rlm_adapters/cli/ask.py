"""The ``rlm`` command: ``rlm ask`` answers a question over files; ``view``, ``export`` and ``eval`` come
from the viewer and evaluation packages.

    rlm ask --context big.log notes/ "Which user ids appear most often?"

The model comes from flags or from ``RLM_MODEL`` / ``RLM_SUB_MODEL`` / ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` (see `rlm_adapters.model_flags`). The answer goes to stdout; a live progress line and
any diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console, RenderableType
from rich.text import Text

from rlm_adapters._terminal import escape_controls
from rlm_adapters.cli._answer_first import INTERRUPTED, AnswerFirst
from rlm_adapters.cli._ask_flags import add_ask_flags
from rlm_adapters.cli._ask_output import print_answer, raw_problem
from rlm_adapters.cli._status_line import StatusLine
from rlm_adapters.cli.terminal_budget import TerminalBudgetPrompt, wanted
from rlm_adapters.core import RLM, Event, OutputSchema, RLMLogger, RLMResult
from rlm_adapters.core.adapter_kit import MAX_SCHEMA_CHARS, EventTally
from rlm_adapters.core.cache import password_flag_warning, shown_url
from rlm_adapters.core.lm import redact
from rlm_adapters.core.sandbox import unset_credential
from rlm_adapters.core.tracing import configure_from_environment
from rlm_adapters.documents import CONVERSIONS
from rlm_adapters.errors import CacheError, RLMError, StoreError
from rlm_adapters.files import load_paths
from rlm_adapters.flags import option_values, spelled, unpriced_lines
from rlm_adapters.model_flags import credentials_problem, model_options
from rlm_adapters.sources import SourceTracker

CLI_CAP_NAMES = {"max_bytes": "--max-bytes", "max_files": "--max-files"}  # how `rlm ask`'s errors name the caps


class Updatable(Protocol):
    """A live line whose text can be replaced (`StatusLine`, or rich's `Status`)."""

    def update(self, status: RenderableType) -> None:
        """Show `status`."""


class ProgressLine:
    """Keeps one live status line on stderr from the run's events (counted by an `EventTally`)."""

    def __init__(self, status: Updatable | None, max_iterations: int) -> None:
        self.status = status
        self.max_iterations = max_iterations
        self.tally = EventTally()

    def __call__(self, event: Event) -> None:
        self.tally.add(event)
        if self.status is not None:  # None: counting only (``--quiet``), for the budget question
            # The line itself, not its text: rich re-renders it on every refresh, so the clock keeps
            # ticking through a long model call, when no event arrives.
            self.status.update(self)

    def __rich__(self) -> Text:
        return Text(self.text())

    def text(self) -> str:
        return self.tally.progress_line(self.max_iterations)


class UsageError(Exception):
    """Bad command-line input: printed as one line naming the flag or value, exit status 2."""


def say(prog: str, message: str) -> None:
    """Print `message` as one unwrapped line on stderr, with what a terminal would act on escaped and no
    credential of a URL (a model endpoint's, which a failure may quote: stderr goes to logs and CI output)."""
    print(f"{prog}: {escape_controls(redact(message), one_line=True)}", file=sys.stderr)


def fail(prog: str, message: str) -> int:
    """`say` `message` (a pipe or a log file keeps it whole); return 2."""
    say(prog, message)
    return 2


def _read_context(args: argparse.Namespace, progress: Callable[[str], None] | None = None) -> Any:
    """One text file gives its text; a converted document (a PDF, ...), several files, a folder or a glob give a
    list of documents, which keep a document's pages and places (`progress` hears ``converting 3/40 PDFs``
    while documents among them are converted)."""
    sources: list[str] = args.context
    if sources == ["-"]:
        text = sys.stdin.read()
        if not text.strip():
            raise UsageError("standard input is empty: pipe the text to reason over into --context -")
        return text
    heard = None if progress is None else lambda count: progress(count.text())
    loaded = load_paths(
        sources,
        [Path("/")],
        max_bytes=args.max_bytes,
        max_files=args.max_files,
        base=Path.cwd(),
        display_base=Path.cwd(),
        progress=heard,
        cap_names=CLI_CAP_NAMES,
    )
    for skipped in loaded.skipped:
        say("rlm", f"skipped {skipped.path}: {skipped.reason}")
    for file in loaded.files:  # what a converter could not read or cut is said, never dropped silently
        for note in file.metadata.get("notes") or ():
            say("rlm", f"{file.path}: {note}")
    empty = loaded.empty(sources)
    if empty is not None:
        raise UsageError(f"{empty}: give --context a file with text in it")
    if (
        len(loaded.files) == 1
        and len(sources) == 1
        and Path(sources[0]).is_file()
        and loaded.files[0].format in (None, "text")
    ):
        return loaded.files[0].text  # plain text, decoded on the host or behind the walls
    return loaded.documents()


# The cloud sandboxes' keys, checked before a run starts (Modal may also use a `modal token new` profile).
def _sandbox_key_problem(environment: str, flag: str = "--sandbox") -> str | None:
    variable = unset_credential(environment, os.environ)  # as the cloud sandbox's class declares it
    return None if variable is None else f"{flag} {environment} needs a key: set {variable}"


def add_ask_parser(subparsers: Any) -> None:
    """Register ``rlm ask``."""
    ask = subparsers.add_parser("ask", help="answer a question over files far larger than a context window")
    add_ask_flags(ask)
    ask.set_defaults(func=run_ask)


def run_ask(args: argparse.Namespace) -> int:
    """Handle ``rlm ask``."""
    err = Console(stderr=True, soft_wrap=True)
    if args.question is None:
        # `rlm ask --context a b "question"`: argparse gives the question to --context; take it back.
        if len(args.context) < 2:
            return fail("rlm ask", "give a question after the context paths")
        args.question = args.context.pop()
    if not args.question.strip():
        return fail(
            "rlm ask", "the question is empty: give it as the last argument, e.g. rlm ask -c notes/ 'What ...?'"
        )
    if args.cache and args.no_cache:
        return fail("rlm ask", "--cache and --no-cache contradict each other: give one")
    cache_source = "--cache" if args.cache else "RLM_CACHE"
    cache = None if args.no_cache else args.cache or os.environ.get("RLM_CACHE") or None
    if args.cache and (line := password_flag_warning("rlm ask", "--cache", args.cache)):
        print(line, file=sys.stderr)
    problem = raw_problem(raw=args.raw, json=args.json)
    if problem is not None:
        return fail("rlm ask", problem)
    try:
        options = model_options(
            model=args.model, sub_model=args.sub_model, backend=args.backend, base_url=args.base_url
        )
        problem = credentials_problem(options)
        if problem is None:
            problem = _sandbox_key_problem(args.environment, spelled(args, "environment"))
        if problem is not None:
            return fail("rlm", problem)
        args.output_schema = read_schema(args.schema) if args.schema else None
        configure_from_environment("rlm")  # RLM_TRACING=otlp|console (docs/tracing.md)
        if args.no_document_cache:
            CONVERSIONS.use_store(None)  # this process is this one command: its setting is the process's
        if _quiet(args, err):
            context = _read_context(args)
        else:
            with StatusLine(err, "reading the context") as status:
                context = _read_context(args, status.update)
        # --html needs a trajectory: without --log-dir it is written to a temporary folder.
        log_dir = args.log_dir or (tempfile.mkdtemp(prefix="rlm-ask-") if args.html else None)
        rlm = RLM(
            **options,
            **option_values(args),
            logger=RLMLogger(log_dir) if log_dir else None,
            verbose=args.verbose,
            cache=cache,
            raise_on_error=False,  # a failed run is printed as one line and exit 1, its log and usage kept
        )
        if args.max_cost is not None:  # before the first call: a cost cap cannot see an unpriced model's spend
            for line in unpriced_lines([rlm.root_model_name, *rlm.sub_model_names], rlm.prices):
                say("rlm", line)
    except StoreError as exc:
        return fail("rlm ask", f"{cache_source}: {exc}")
    except CacheError as exc:
        return fail("rlm ask", f"{cache_source} {exc.path!r} {exc.reason}; it was left as it is: give another file")
    except UsageError as exc:
        return fail("rlm ask", str(exc))
    except (RLMError, ValueError, OSError) as exc:
        return fail("rlm", str(exc))
    result, first = _run_with_progress(rlm, context, args, err)
    stopped = first.result is result and "sources" in result.metadata.get("unfinished", {})
    resumed = result.resumed(_cache_name(cache))
    if resumed is not None:
        say("rlm", resumed)  # once, on a pipe as on a terminal: replayed calls are never silent
    if args.html and result.trajectory_file is not None:
        _write_html(result.trajectory_file, Path(args.html))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))  # ASCII JSON: every control character is an escape
    elif args.output_schema is not None and result.value is not None:
        print(json.dumps(result.value))  # ASCII JSON, as --json
    elif result.response and (args.sources or not first.printed):
        print_answer(result, sources=args.sources, raw=args.raw, answer=not first.printed)
    if stopped and result.metadata["unfinished"]["sources"] == INTERRUPTED:
        return first.code  # the answer (and the one line saying its sources were not finished) is printed
    if result.finish_reason != "final":
        say("rlm", unfinished(result, args))
        return 1
    return 0


def read_schema(path: str) -> OutputSchema:
    """The JSON schema in the file `path`, checked (``--schema``)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_SCHEMA_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--schema {path!r}: cannot read it ({exc})") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise UsageError(f"--schema {path!r} is over {MAX_SCHEMA_CHARS:,} characters")
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--schema {path!r} is not JSON ({exc}); give a file holding a JSON schema") from None
    if not isinstance(schema, dict):
        raise UsageError(f"--schema {path!r} must hold a JSON schema (an object), got a {type(schema).__name__}")
    return OutputSchema.of(schema, f"--schema {path!r}")


def unfinished(result: RLMResult, args: argparse.Namespace) -> str:
    """Why a run stopped without a final answer, in terms of the flag that would change it."""
    partial = "the output above is its best partial answer" if result.response.strip() else "it gave no answer"
    detail = f" ({result.error})" if result.error else ""
    reason = result.finish_reason
    if reason == "max_iterations":
        return (
            f"no final answer within --max-iterations {args.max_iterations} (finish_reason={reason!r}); "
            f"{partial}; raise --max-iterations to give it more turns"
        )
    if reason == "timeout":
        seconds = args.run_timeout
        if seconds is not None:  # the flag says it all; the engine's words would say it again
            limit = f"reached {spelled(args, 'run_timeout')} {seconds:g} s"
            return f"the run {limit} (finish_reason={reason!r}); {partial}; raise {spelled(args, 'run_timeout')}"
        return f"the run timed out{detail} (finish_reason={reason!r}); {partial}"
    if reason == "budget":
        return (
            f"the run ran out of budget{detail} (finish_reason={reason!r}); {partial}; raise --max-cost if it was cost"
        )
    if reason == "cancelled":
        return f"the run was cancelled (finish_reason={reason!r}); {partial}"
    return f"the run failed{detail or ' without saying why'} (finish_reason={reason!r}); {partial}"


def _quiet(args: argparse.Namespace, err: Console) -> bool:
    """No live progress line: asked for (--quiet), the verbose log instead, or stderr is not a terminal."""
    return bool(args.quiet or args.verbose or not err.is_terminal)


def _cache_name(cache: str | None) -> str:
    """How the replay line names the cache: a file by its name, a store by its URL without the password."""
    if not cache:
        return "the call cache"
    return shown_url(cache) if "://" in cache else Path(cache).name


def _run_with_progress(rlm: RLM, context: Any, args: argparse.Namespace, err: Console) -> tuple[RLMResult, AnswerFirst]:
    """Run with the progress line; the result and what printed its answer first (`AnswerFirst.code` is the
    exit status when Ctrl-C or SIGTERM stopped the sources phase: the result is then the answer without them).
    """
    quiet = _quiet(args, err)
    # A single file's text is one document: name it as the user did, so sources read "notes.txt:12".
    name = "stdin" if args.context == ["-"] else args.context[0] if len(args.context) == 1 else "context"
    cite = args.sources or args.json
    schema = args.output_schema
    with contextlib.ExitStack() as stack:
        status = None if quiet else stack.enter_context(StatusLine(err, "starting"))
        progress = ProgressLine(status, args.max_iterations)  # quiet: it only counts, for the question below
        # On a terminal, a limit about to stop the run asks first (on stderr, with the progress line paused).
        on_budget = TerminalBudgetPrompt(progress.tally, status.pause if status else None) if wanted() else None
        # Sources and claims only when something prints them: a plain answer does not pay for the matching.
        # With them, the answer is printed the moment it exists, before them (JSON and a typed answer: after).
        shown = not args.json and schema is None
        first = AnswerFirst(show=args.sources and shown, raw=args.raw, status=status, stream=shown, finding=cite)
        tracker = SourceTracker(context, max_output_chars=rlm.max_output_chars, text_name=name) if cite else None
        observers = [first, tracker] if tracker is not None else [first]
        call = rlm.acompletion(
            context, args.question, callbacks=[progress], on_budget=on_budget, output_schema=schema, observers=observers
        )
        try:
            return asyncio.run(call), first
        except (KeyboardInterrupt, asyncio.CancelledError):
            if first.result is None:  # before the answer existed: the run was stopped, as always
                raise KeyboardInterrupt from None
            return first.result, first  # its sources phase was: the answer is kept, the note says so


def _write_html(log: Path, out: Path) -> None:
    try:
        viewer = importlib.import_module("rlm_adapters.viewer.html")
    except ImportError:
        say("rlm", "the HTML viewer is not available in this installation")
        return
    try:
        viewer.write_html(log, out)
    except (OSError, ValueError) as exc:  # the answer is still printed after this line
        say("rlm", f"could not write --html {str(out)!r}: {exc}")
        return
    say("rlm", f"wrote {out}")
