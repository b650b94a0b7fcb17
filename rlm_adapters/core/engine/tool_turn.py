"""One root turn's calls of the caller's tools: collected, checked, then settled.

Calls arrive from model code (``call_tool(name, **args)``, a ``call_tool`` call frame answered by the broker)
or from the reply itself (a ``CALL_TOOL name {...}`` line in the model's own prose, read like a text
FINAL: never inside fences or ``>`` quotes, never a line that repeats the context). After the turn,
`TurnCalls.settle` decides: the run ends with the calls, the model is told what was wrong and tries again
(none of that turn's calls is kept), or, with no call made, the turn goes on as usual.

A call's arguments are bounded as they arrive (`check_arguments`, cheap); their check against the tool's
JSON schema waits for `settle`, which runs it on a worker thread under the run's deadline: a caller's schema
and model code's arguments may make it take seconds, and the run's loop serves its sandbox meanwhile.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rlm_adapters.core.engine.parsing import QuoteCheck, closing_index, prose_of
from rlm_adapters.core.engine.tool_calls import (
    MAX_ARGS_CHARS,
    MAX_CALLS_PER_TURN,
    MAX_TURN_ARGS_CHARS,
    InvalidToolCall,
    ToolCall,
    ToolOffer,
    args_text,
    check_arguments,
)
from rlm_adapters.core.sandbox import CallError

# A CALL_TOOL line's arguments written as a Python dict (not JSON) are read up to this length: the scan for
# its closing brace runs in Python, once per line, so it is kept short (JSON arguments may be longer).
MAX_LITERAL_CHARS = 64_000
# How many times a turn whose calls were refused (or that answered without a required call) is sent back.
MAX_TOOL_CALL_RETRIES = 2
# A reply line that calls a tool: CALL_TOOL, the tool's name, then its arguments as one JSON object.
_CALL_LINE = re.compile(r"^ {0,3}[*_]*CALL_TOOL[ \t]+([^\s{}()`*]+)[ \t]*", re.MULTILINE)
Within = Callable[[Awaitable[Any]], Awaitable[Any]]
QUOTED_CALL = (
    "A CALL_TOOL line in your reply was not taken as a call: it is quoted (a `>` line, a fence, indented code) "
    "or repeats text of the context. To call a tool, write the line in your own words, or use call_tool(...) "
    "in a ```repl block."
)


@dataclass(frozen=True)
class Settlement:
    """What a turn's tool calls mean for the run.

    Attributes:
        action: ``finish`` (end the run with the calls), ``retry`` (tell the model `message`; none of the
            turn's calls is kept), ``fail`` (a required call never came: end with an error) or ``none``
            (no call: the turn goes on as usual, with `message` as a note when there is one).
        message: For the model (``retry`` / ``none``) or the run's error (``fail``).
    """

    action: Literal["finish", "retry", "fail", "none"]
    message: str = ""


class TurnCalls:
    """The calls of the caller's tools made in the current turn of one top-level run.

    Args:
        offer: The tools, the choice and whether several calls per turn are allowed.
    """

    def __init__(self, offer: ToolOffer) -> None:
        self.offer = offer
        self.accepted: list[ToolCall] = []
        self.rejected: list[InvalidToolCall] = []
        self.retries = 0
        # True while one of the run's own cells executes: a call from a thread left running after its
        # cell, or from the session's hidden cells, is refused.
        self.accepting = False
        self._calls = 0
        self._chars = 0
        self._overflow = False
        self._notes: list[str] = []
        self._seed = ""
        self._issued = 0
        self._checked = 0  # how many of `accepted` have been checked against their tool's schema
        self._order: dict[str, int] = {}  # each call's place in the turn, to report refusals in order

    def begin(self, conversation: Sequence[str]) -> None:
        """Start reading a turn whose root conversation (the reply included) is `conversation`.

        Call ids derive from it, so a run replayed from the call cache issues the same ids (an agent's
        next step, which shows them to the root model, then replays too), and two steps never share one.
        """
        digest = hashlib.sha256()
        for text in conversation:
            digest.update(text.encode("utf-8", "surrogatepass"))
            digest.update(b"\0")
        self._seed = digest.hexdigest()
        self._issued = 0

    def _new_id(self) -> str:
        self._issued += 1
        call_id = "call_" + hashlib.sha256(f"{self._seed}:{self._issued}".encode()).hexdigest()[:24]
        self._order[call_id] = len(self._order)
        return call_id

    @property
    def made(self) -> bool:
        """True once this turn called a tool (well or badly)."""
        return self._calls > 0

    def add(self, name: Any, args: Any) -> None:
        """Record one ``call_tool`` from model code; a bad call is kept as refused, for `settle` to report.

        Raises:
            CallError: The call cannot be taken at all (outside a cell, ``tool_choice="none"``, too many calls).
        """
        if not self.accepting:
            raise CallError("call_tool works only inside a running cell, not from a thread that outlived it")
        if self.offer.choice == "none":
            raise CallError("no tool may be called in this run (tool_choice='none'); finish with FINAL instead")
        if self._calls >= MAX_CALLS_PER_TURN:
            self._overflow = True
            raise CallError(f"at most {MAX_CALLS_PER_TURN} tool calls per turn")
        self._calls += 1
        self._record(name, args)

    def add_text(self, reply: str, is_quoted: QuoteCheck) -> None:
        """Record the ``CALL_TOOL name {...}`` lines of the model's own prose in `reply`."""
        if self.offer.choice == "none":
            return
        prose = prose_of(reply)
        for match in _CALL_LINE.finditer(prose):
            end = prose.find("\n", match.start())
            line = prose[match.start() : len(prose) if end < 0 else end].strip()
            if is_quoted(line) or is_quoted(line.strip("*_ ")):
                self._notes.append(QUOTED_CALL)
                continue
            if self._calls >= MAX_CALLS_PER_TURN:
                self._overflow = True
                break
            self._calls += 1
            name = match.group(1)
            args, problem = parse_arguments(prose, match.end())
            if problem is not None:
                self.rejected.append(InvalidToolCall(self._new_id(), name, args_text(args), problem))
            else:
                self._record(name, args)

    def _record(self, name: Any, args: Any) -> None:
        if not isinstance(name, str) or not name:
            self.rejected.append(InvalidToolCall(self._new_id(), None, args_text(args), "no tool name was given"))
            return
        name = name[:200]
        room = max(0, min(MAX_ARGS_CHARS, MAX_TURN_ARGS_CHARS - self._chars))
        checked, size, problem = check_arguments(args, room)
        self._chars += size
        if checked is None:
            self.rejected.append(InvalidToolCall(self._new_id(), name, None, str(problem)))
            return
        self.accepted.append(ToolCall(self._new_id(), name, checked))  # its schema is checked by `settle`

    async def _check(self, within: Within | None) -> None:
        """Check the arguments recorded since the last check against their tools' schemas, on a worker thread
        (`within` bounds the wait: the run's deadline); a call that fails moves to `rejected`."""
        pending = self.accepted[self._checked :]
        if not pending:
            return
        offer = self.offer
        work = asyncio.to_thread(lambda: [offer.problems(call.name, call.args) for call in pending])
        found: list[list[str]] = await (work if within is None else within(work))
        kept = self.accepted[: self._checked]
        for call, problems in zip(pending, found, strict=True):
            if problems:
                self.rejected.append(InvalidToolCall(call.id, call.name, args_text(call.args), "; ".join(problems)))
            else:
                kept.append(call)
        self.accepted = kept
        self._checked = len(kept)
        self.rejected.sort(key=lambda call: self._order.get(call.id, 0))

    async def settle(self, final_given: bool, within: Within | None = None) -> Settlement:
        """After the turn: check the calls' arguments, then end the run with its calls, send the model back
        to mend them, or go on.

        Args:
            final_given: The turn also gave a final answer (then kept as the text beside the calls).
            within: Bounds the wait for the schema checks (the run's deadline, `RunTree.within_deadline`).
        """
        await self._check(within)
        notes, self._notes = self._notes, []
        offer = self.offer
        if self.made:
            problems = [f"- {call.name or '(no name)'}: {call.error}" for call in self.rejected]
            if self._overflow:
                problems.append(f"- more than {MAX_CALLS_PER_TURN} calls were made; at most that many fit in one turn")
            if not offer.parallel and len(self.accepted) > 1:
                problems.append(
                    f"- {len(self.accepted)} calls were made; call one tool per turn (parallel calls are off)"
                )
            if not problems:
                return Settlement("finish")
            if self.retries < MAX_TOOL_CALL_RETRIES:
                self.retries += 1
                self.clear()
                return Settlement("retry", _retry_message(problems, notes))
            if not offer.parallel and len(self.accepted) > 1:
                extra = self.accepted[1:]
                self.accepted = self.accepted[:1]
                self.rejected += [
                    InvalidToolCall(c.id, c.name, args_text(c.args), "one call per turn (parallel calls are off)")
                    for c in extra
                ]
            return Settlement("finish")
        if final_given and offer.mode == "required":
            wanted = f"`{offer.forced_tool}`" if offer.forced_tool else "one of the tools"
            if self.retries < MAX_TOOL_CALL_RETRIES:
                self.retries += 1
                return Settlement(
                    "retry",
                    f"Your answer was not accepted: this turn must end with a call of {wanted} "
                    f"(tool_choice={offer.choice!r}). Call it with call_tool(...) or a CALL_TOOL line.",
                )
            return Settlement(
                "fail",
                f"tool_choice={offer.choice!r} asks for a call of {wanted}, and the model answered without one "
                f"{self.retries + 1} times",
            )
        return Settlement("none", "\n".join(notes))

    def clear(self) -> None:
        """Forget the turn's calls (a new turn, or one sent back to be mended)."""
        self.accepted, self.rejected = [], []
        self._checked = 0
        self._order.clear()
        self._calls = 0
        self._chars = 0
        self._overflow = False


def _retry_message(problems: list[str], notes: list[str]) -> str:
    return "\n".join(
        [
            "None of your tool calls was made, because:",
            *problems,
            *notes,
            "Make all of this turn's calls again, corrected (none of them was kept); each tool's argument "
            "schema is in the system prompt.",
        ]
    )


def parse_arguments(text: str, start: int) -> tuple[Any, str | None]:
    """The arguments after a ``CALL_TOOL name``: one JSON object (a Python dict literal is accepted too).

    Nothing but spaces up to the end of the line means no arguments.

    Returns:
        The arguments (or the text that failed, for the report) and the problem (None when there is none).
    """
    line_end = text.find("\n", start)
    rest = text[start : len(text) if line_end < 0 else line_end]
    if not rest.strip():
        return {}, None
    if not rest.lstrip().startswith("{"):
        return rest.strip()[:200], 'after the tool\'s name, give its arguments as one JSON object: {"name": value}'
    start += len(rest) - len(rest.lstrip())
    try:
        value, _end = json.JSONDecoder().raw_decode(text, start)
    except (ValueError, RecursionError):
        value = _python_literal(text, start)
    if isinstance(value, dict):
        return value, None
    shown = text[start : start + 200]
    return shown, "the arguments are not one JSON object (check the quotes and braces)"


def _python_literal(text: str, start: int) -> Any:
    """A dict written as a Python literal (single quotes, True / None) from `start`, or None."""
    end = closing_index(text, start + 1, "{", "}", MAX_LITERAL_CHARS)
    if end is None:
        return None
    try:
        return ast.literal_eval(text[start : end + 1])
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
