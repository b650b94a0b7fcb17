"""The REPL: one persistent namespace with the RLM's functions in it, and running a cell in that namespace.

`Repl` puts `calls.HostCalls`, `finals.Finals`, ``SHOW_VARS`` and the caller's tools into the namespace,
runs each cell with its output captured (`capture`), echoes a trailing expression, keeps tracebacks to the
cell's own frames and puts back the REPL's names if model code rebound them. The worker program runs it
behind the walls; the ``local`` sandbox runs it in the host's process.
"""

from __future__ import annotations

import ast
import itertools
import os
import sys
import time
import traceback

from .calls import HostCalls
from .capture import ROUTING, CellOutput
from .finals import AnswerDict, Finals, FinalSignal
from .text import cap, describe_value, safe_text, type_name
from .values import decode_value

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .calls import CallFunction

DEFAULT_CAPTURE_CHARS = 1_000_000
MAX_VARIABLES = 500

RESERVED_NAMES = frozenset(
    {
        "context",
        "prompt",
        "llm_query",
        "llm_query_batched",
        "rlm_query",
        "rlm_query_batched",
        "FINAL",
        "FINAL_VAR",
        "SHOW_VARS",
        "call_tool",
        "answer",
        "history",
        "_rlm_session",
    }
)
# A persistent session's REPL pulls new contexts and histories as a call of this reserved tool name.
SESSION_TOOL = "_rlm_session"


class Repl:
    """A persistent Python namespace with the RLM's functions in it.

    Args:
        context: The input value (already loaded).
        call: How a sub-call reaches the host: ``call(kind, args) -> value``; it raises `CallFailed`
            or `BudgetExhaustedError` on failure.
        tools: Names of host-side functions to expose, with their descriptions.
        capture_chars: How much of a cell's printed output is kept.
        workdir: Where `open()` with a relative path lands, for a REPL sharing its process (and working
            folder) with others: the ``local`` sandbox. No ``os.chdir``, so neighbouring runs cannot race.
    """

    def __init__(
        self,
        context: Any,
        call: CallFunction,
        tools: dict[str, str] | None = None,
        capture_chars: int = DEFAULT_CAPTURE_CHARS,
        workdir: str | None = None,
    ) -> None:
        self._capture_chars = capture_chars
        self._cells = itertools.count(1)
        self.namespace: dict[str, Any] = {"__name__": "__rlm__", "__builtins__": _builtins_for(workdir)}
        # What is put back after every cell if model code rebinds it (`context = context.split()`).
        self._scaffold: dict[str, Any] = {}
        self.calls = HostCalls(call)
        self.finals = Finals(self.namespace, self._scaffold)
        self.namespace.update(
            context=context,
            prompt=context,
            llm_query=self.calls.llm_query,
            llm_query_batched=self.calls.llm_query_batched,
            rlm_query=self.calls.rlm_query,
            rlm_query_batched=self.calls.rlm_query_batched,
            FINAL=self.finals.final,
            FINAL_VAR=self.finals.final_var,
            SHOW_VARS=self.show_vars,
            call_tool=self.calls.call_tool,
        )
        for name, description in (tools or {}).items():
            self.namespace[name] = self.calls.tool(name, description)
        self._scaffold.update({k: v for k, v in self.namespace.items() if not k.startswith("__")})
        self._builtin_names = set(self.namespace)
        self.namespace["answer"] = AnswerDict(self.finals.answer_ready)
        self.session = ReplSession(self, call)
        self.namespace[SESSION_TOOL] = self.session

    @property
    def on_final(self) -> Callable[[dict[str, Any]], None] | None:
        """Called with the final answer the moment it is given, before the cell ends (see `Finals`)."""
        return self.finals.on_final

    @on_final.setter
    def on_final(self, announce: Callable[[dict[str, Any]], None] | None) -> None:
        self.finals.on_final = announce

    @property
    def last_final(self) -> dict[str, Any] | None:
        """The final answer given in the current (or last) cell, if any."""
        return self.finals.last

    def show_vars(self) -> dict[str, str]:
        """Print and return the user's variables with their types and sizes."""
        listing = self.variables()
        for name, description in listing.items():
            print(f"{name}: {description}")
        if not listing:
            print("(no variables yet)")
        return listing

    # -- running cells --------------------------------------------------------------------------
    def variables(self) -> dict[str, str]:
        """The user's variables (not modules, not the REPL's own functions) with short descriptions."""
        out: dict[str, str] = {}
        for name, value in list(self.namespace.items()):
            if (
                not isinstance(name, str)
                or name.startswith("_")
                or name in self._builtin_names
                or isinstance(value, AnswerDict)
            ):
                continue
            if type(value).__name__ == "module":
                continue
            if len(out) >= MAX_VARIABLES:
                out["..."] = f"{len(self.namespace) - len(out):,} more names not listed"
                break
            out[name[:200]] = describe_value(value)
        return out

    def execute(self, code: str) -> dict[str, Any]:
        """Run one cell; returns the ``result`` message body (without the type)."""
        number = next(self._cells)
        capture = CellOutput(self._capture_chars)
        self.finals.last = None
        error: str | None = None
        started = time.perf_counter()
        stdout, stderr = ROUTING.install()
        stdout.bind(capture)
        stderr.bind(capture)
        recursion_limit = sys.getrecursionlimit()
        try:
            error = self._run(code, f"<cell {number}>")
        finally:
            stdout.bind(None)
            stderr.bind(None)
            # A cell may set a tiny limit; the worker's own work (encoding the result) needs the usual one.
            sys.setrecursionlimit(max(recursion_limit, 1000))
            self.restore_scaffold()
        try:
            variables = self.variables()
        except BaseException as exc:  # a namespace mutated by a thread while listed, ...
            variables = {}
            error = error or f"the REPL's variables could not be listed: {type_name(exc)}"
        return {
            "output": capture.getvalue(),
            "output_chars": capture.total,
            "error": None if error is None else cap(error, self._capture_chars),
            "final": self.finals.last,
            "variables": variables,
            "duration": time.perf_counter() - started,
        }

    def restore_scaffold(self) -> None:
        """Put back the REPL's own names if model code rebound them; user variables stay.

        An `answer` rebound to a plain dict with ``ready`` set still counts as the final answer.
        """
        for name, value in self._scaffold.items():
            if self.namespace.get(name) is not value:
                self.namespace[name] = value
        # A dict rebound to `answer` is the reference's protocol (re-wrapped, `ready` honoured); any other
        # value is a user variable (`answer = "..."; FINAL_VAR("answer")` is common) and stays.
        current = self.namespace.get("answer")
        if isinstance(current, dict) and not isinstance(current, AnswerDict):
            if current.get("ready") and self.finals.last is None:
                self.finals.answer_ready(current.get("content", ""))
            self.namespace["answer"] = AnswerDict(self.finals.answer_ready, dict(current))
        elif "answer" not in self.namespace:
            self.namespace["answer"] = AnswerDict(self.finals.answer_ready)

    def add_values(self, encoded: dict[str, Any]) -> None:
        """Put plain values given as tools (encoded with `encode_value`) into the namespace."""
        for name, data in encoded.items():
            self.namespace[name] = decode_value(data)

    def set_scaffold(self, name: str, value: Any) -> None:
        """Make `name` a REPL name that is restored after every cell (context aliases, histories)."""
        self._scaffold[name] = value
        self.namespace[name] = value
        self._builtin_names.add(name)

    def _run(self, code: str, filename: str) -> str | None:
        try:
            tree = ast.parse(code, filename=filename, mode="exec")
        except SyntaxError as exc:
            return "".join(traceback.format_exception_only(SyntaxError, exc)).strip()
        except Exception as exc:  # e.g. a lone surrogate in the source (UnicodeEncodeError), nesting too deep
            return f"the cell's code could not be parsed: {type_name(exc)}: {safe_text(exc)[:500]}"
        # Echo the value of a trailing expression, as notebooks do: models often end with `len(x)`.
        echo = None
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
            echo = ast.Expression(last.value)
        try:
            exec(compile(tree, filename, "exec"), self.namespace)
            if echo is not None:
                value = eval(compile(echo, filename, "eval"), self.namespace)
                if value is not None:
                    print(repr(value))
        except FinalSignal:
            return None
        except BaseException as exc:
            try:
                return _short_traceback(exc, filename, code)
            except BaseException:  # str(exc) raised, or ran out of memory / recursion depth
                return f"{type_name(exc)} (its message could not be shown)"
        return None


class ReplSession:
    """What a persistent session adds to a REPL between runs, pulled from the host over the call channel.

    Each later run's context becomes ``context_1``, ``context_2``, ... and each finished conversation
    ``history_0``, ... ; ``context`` / ``history`` name the latest one (or the first, as the reference
    RLM does, when the host says ``alias="first"``). The values travel as JSON in a call reply, so this
    works the same in every sandbox kind.
    """

    def __init__(self, repl: Repl, call: CallFunction) -> None:
        self._repl = repl
        self._call = call
        self.contexts = 1
        self.histories = 0

    def pull(self) -> dict[str, int]:
        """Fetch the host's pending contexts and histories into the namespace; returns the counts."""
        payload = self._call("tool", {"name": SESSION_TOOL, "args": [], "kwargs": {}})
        first = payload.get("alias") == "first"
        repl = self._repl
        if self.contexts == 1 and "context_0" not in repl.namespace:
            repl.set_scaffold("context_0", repl.namespace.get("context"))
        for value in payload.get("contexts") or []:
            repl.set_scaffold(f"context_{self.contexts}", value)
            self.contexts += 1
        for value in payload.get("histories") or []:
            repl.set_scaffold(f"history_{self.histories}", value)
            self.histories += 1
        latest = 0 if first else self.contexts - 1
        repl.set_scaffold("context", repl.namespace[f"context_{latest}"])
        repl.set_scaffold("prompt", repl.namespace["context"])
        if self.histories:
            repl.set_scaffold("history", repl.namespace[f"history_{0 if first else self.histories - 1}"])
        repl.namespace["answer"] = AnswerDict(repl.finals.answer_ready)
        return {"contexts": self.contexts, "histories": self.histories}


def _builtins_for(workdir: str | None) -> Any:
    """The builtins of a namespace: the real ones, with `open` resolving relative paths in `workdir`."""
    import builtins

    if workdir is None:
        return builtins
    real_open = builtins.open

    def open_in_workdir(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str | bytes | os.PathLike) and not os.path.isabs(os.fsdecode(file)):
            file = os.path.join(workdir, os.fsdecode(file))
        return real_open(file, *args, **kwargs)

    open_in_workdir.__doc__ = real_open.__doc__
    return {**vars(builtins), "open": open_in_workdir}


def _short_traceback(exc: BaseException, filename: str, code: str) -> str:
    """The exception with only the frames of user code, so tracebacks stay short and relevant."""
    # The lines Python numbers (\n, \r\n, \r), not `splitlines`' (U+2028 in a string would shift them all).
    source = code.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lines = []
    for frame in frames[-5:]:
        text = source[frame.lineno - 1].strip() if frame.lineno and frame.lineno <= len(source) else ""
        lines.append(f"  line {frame.lineno}, in {frame.name}: {text}")
    head = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join(["Traceback (most recent call last):", *lines, head]) if lines else head
