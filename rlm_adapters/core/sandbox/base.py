"""The sandbox protocol: start a REPL with a context, run cells, answer its calls, close."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from rlm_adapters.core.context import RunContext, write_context_file
from rlm_adapters.errors import SandboxError

SandboxKind = Literal["local", "subprocess", "docker", "e2b", "modal", "prime", "daytona"]

# The host's answer to a call from the REPL: (kind, args) -> value.
# It raises `CallError` (reported to user code as an exception) or `BudgetSpent`.
CallHandler = Callable[[str, dict[str, Any]], Coroutine[Any, Any, Any]]


class CallError(Exception):
    """A call from the REPL failed; the message is shown to the model's code."""


class BudgetSpent(Exception):
    """The run's budget refused a call from the REPL; model code gets a ``BudgetExhaustedError``.

    Defined here, with the handler contract, so that sandboxes need not import the budget:
    `rlm_adapters.core.engine.budget.BudgetExhausted` is the engine's subclass.
    """


@dataclass(frozen=True)
class FinalAnswer:
    """An answer given with FINAL / FINAL_VAR: its text and, when JSON-able, the value itself."""

    text: str
    value: Any = None

    @classmethod
    def from_message(cls, final: dict[str, Any]) -> FinalAnswer:
        """From the worker's ``final`` object (a text answer is sent once, flagged ``value_is_text``)."""
        text = str(final["text"])
        return cls(text, text if final.get("value_is_text") is True else final.get("value"))


@dataclass
class CellResult:
    """The outcome of one cell.

    Attributes:
        output: What the cell printed (capped by the sandbox).
        output_chars: How many characters it printed in all.
        error: A short traceback, or a message naming the limit that stopped the cell.
        final: The final answer if the cell called FINAL / FINAL_VAR.
        variables: The user's variables after the cell, name -> short description.
        duration: Seconds the cell took.
        timed_out: The cell ran past its time limit and was stopped.
        variables_lost: The REPL had to be restarted: every variable but `context` is gone.
    """

    output: str
    output_chars: int = 0
    error: str | None = None
    final: FinalAnswer | None = None
    variables: dict[str, str] = field(default_factory=dict)
    duration: float = 0.0
    timed_out: bool = False
    variables_lost: bool = False

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> CellResult:
        """Build from a worker ``result`` frame."""
        final = message.get("final")
        return cls(
            output=str(message.get("output", "")),
            output_chars=int(message.get("output_chars", 0)),
            error=message.get("error"),
            final=FinalAnswer.from_message(final) if final else None,
            variables=dict(message.get("variables") or {}),
            duration=float(message.get("duration", 0.0)),
        )


@dataclass(frozen=True)
class SandboxSetup:
    """Everything a sandbox needs to start a REPL.

    Attributes:
        context: The prepared context: an in-process sandbox uses its value, an out-of-process one writes
            it into `scratch` with `write_context` and has its worker load the file.
        handler: Answers the REPL's calls.
        tools: Host-side functions to expose, name -> description.
        values: Extra variables to put in the namespace, encoded with `worker.encode_value`.
        scratch: A folder the run may write into.
    """

    context: RunContext
    handler: CallHandler
    tools: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    scratch: Path | None = None


# A context this small is written in the event loop: well under a millisecond, where a thread hop waits
# behind every other one (a burst of 64 nested children queued about 50 ms each for the default executor).
INLINE_WRITE_CHARS = 256 * 1024


async def write_context(setup: SandboxSetup) -> Path:
    """Write the setup's context once into its scratch folder, for an out-of-process worker to load.

    Raises:
        SandboxError: there is no scratch folder, or the file cannot be written (a full disk, say).
    """
    if setup.scratch is None:
        raise SandboxError("this sandbox loads the context from a file: give SandboxSetup a scratch folder")
    try:
        if setup.context.size <= INLINE_WRITE_CHARS:
            return write_context_file(setup.context, setup.scratch)
        return await asyncio.to_thread(write_context_file, setup.context, setup.scratch)
    except OSError as exc:  # e.g. a full disk: a clean error result, not a traceback
        raise SandboxError(f"cannot write the context file into {str(setup.scratch)!r}: {exc}") from exc


@runtime_checkable
class Sandbox(Protocol):
    """A REPL the engine runs model-written code in."""

    kind: str

    @property
    def isolation(self) -> str:
        """The isolation level actually reached, stated plainly (reported in results and logs)."""
        ...

    async def start(self, setup: SandboxSetup) -> None:
        """Start the REPL with the context loaded."""
        ...

    async def execute(self, code: str, timeout: float | None) -> CellResult:
        """Run one cell. A cell past `timeout` seconds is stopped and reported, never left running."""
        ...

    async def aclose(self) -> None:
        """Stop the REPL: no process of it runs on. Slow clean-up may finish in the background. Safe twice."""
        ...


@runtime_checkable
class BlockingSetup(Protocol):
    """A sandbox with slow, blocking work to do before its first use (the subprocess sandbox's isolation probe)."""

    def blocking_setup(self) -> Callable[[], None] | None:
        """That work, for a worker thread (None when nothing is left to do: no thread hop is needed)."""
        ...
