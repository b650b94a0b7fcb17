"""`verbose=True`: each iteration printed to the terminal with rich (stderr, never stdout)."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from rlm_adapters._terminal import escape_controls, safe_text
from rlm_adapters.core.events import (
    BudgetEvent,
    CellExecuted,
    ConcurrencyCut,
    Event,
    RootCall,
    RunFinished,
    RunStarted,
    cut,
)
from rlm_adapters.core.tally import EventTally

OUTPUT_CHARS = 1200


def _line(*parts: tuple[str, str] | str) -> Text:
    """A line of our own words (plain strings) and values from the run (``(value, style)``, escaped)."""
    out = Text()
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        else:
            out.append(safe_text(part[0], part[1], one_line=True))
    return out


class ConsolePrinter:
    """An event subscriber that prints a readable account of the run.

    Everything from the run (the model's code and replies, what cells printed, model and endpoint names)
    is escaped with `escape_controls` and shown as rich `Text`, so no terminal sequence or rich markup in
    it acts.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.tally = EventTally()
        # The tally's finished, failed and cached sub-calls when the last cell was printed.
        self._shown = (0, 0, 0)

    def __call__(self, event: Event) -> None:
        """Print one event."""
        self.tally.add(event)
        indent = "  " * event.depth
        if isinstance(event, RunStarted):
            label = "nested RLM" if event.depth else "RLM"
            chars = event.context_description.get("total_chars")
            self.console.rule(
                _line(
                    f"{indent}{label} ",
                    (f"{event.run_id[:8]} · {event.root_model} · {event.sandbox} ", ""),
                    (f"({event.isolation_level})", ""),
                    f" · {chars:,} chars" if isinstance(chars, int) else "",
                )
            )
        elif isinstance(event, RootCall):
            replayed = " (cached)" if event.cached else ""
            self.console.print(
                _line(
                    indent,
                    (f"iteration {event.iteration}", "bold cyan"),
                    " ",
                    (event.model, ""),
                    f": {event.input_tokens:,} in / {event.output_tokens:,} out tokens, {event.duration:.2f} s",
                    replayed,
                )
            )
        elif isinstance(event, CellExecuted):
            code = escape_controls(event.code)
            self.console.print(Panel(Syntax(code, "python", word_wrap=True), title=f"{indent}code"))
            shown = cut(event.output, OUTPUT_CHARS) if event.output else "(no output)"
            if event.error:
                shown += f"\n[error] {cut(event.error, OUTPUT_CHARS)}"
            calls = self.tally.sub_calls_finished - self._shown[0]
            if calls:
                cached = self.tally.sub_calls_cached - self._shown[2]
                replayed = f" ({cached} cached)" if cached else ""
                shown += f"\n[{calls} sub-calls{replayed}, {self.tally.sub_call_errors - self._shown[1]} failed]"
                tally = self.tally
                self._shown = (tally.sub_calls_finished, tally.sub_call_errors, tally.sub_calls_cached)
            self.console.print(Panel(safe_text(shown), title=f"{indent}output ({event.duration:.2f} s)"))
        elif isinstance(event, ConcurrencyCut):
            self.console.print(
                _line(
                    indent,
                    (f"overloaded: {event.endpoint} now takes {event.limit} calls at once", "yellow"),
                    (f" (ceiling {event.ceiling})", "yellow"),
                )
            )
        elif isinstance(event, BudgetEvent):
            self.console.print(_line(indent, (f"budget: {event.message}", "yellow")))
        elif isinstance(event, RunFinished):
            total = event.usage["total"]
            replayed = (
                f" ({total['cached_calls']} of {total['calls']} calls cached)" if total.get("cached_calls") else ""
            )
            self.console.print(
                _line(
                    indent,
                    (event.finish_reason, "bold green"),
                    f" after {event.iterations} iterations, {event.duration:.2f} s, ${total['cost']:.4f}{replayed}",
                )
            )
            if event.depth == 0:
                self.console.print(Panel(safe_text(cut(event.response, 4000)), title="answer"))
