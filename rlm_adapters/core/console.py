"""`verbose=True`: each iteration printed to the terminal with rich (stderr, never stdout)."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax

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


class ConsolePrinter:
    """An event subscriber that prints a readable account of the run."""

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
            self.console.rule(
                f"{indent}{label} {event.run_id[:8]} · {event.root_model} · {event.sandbox} "
                f"({event.isolation.split(';')[0]}) · {event.context_description['total_chars']:,} chars"
            )
        elif isinstance(event, RootCall):
            replayed = " (cached)" if event.cached else ""
            self.console.print(
                f"{indent}[bold cyan]iteration {event.iteration}[/] {event.model}: "
                f"{event.input_tokens:,} in / {event.output_tokens:,} out tokens, {event.duration:.2f} s{replayed}"
            )
        elif isinstance(event, CellExecuted):
            self.console.print(Panel(Syntax(event.code, "python", word_wrap=True), title=f"{indent}code"))
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
            self.console.print(Panel(shown, title=f"{indent}output ({event.duration:.2f} s)"), markup=False)
        elif isinstance(event, ConcurrencyCut):
            self.console.print(
                f"{indent}[yellow]overloaded: {event.endpoint} now takes {event.limit} calls at once "
                f"(ceiling {event.ceiling})[/]"
            )
        elif isinstance(event, BudgetEvent):
            self.console.print(f"{indent}[yellow]budget: {event.message}[/]")
        elif isinstance(event, RunFinished):
            total = event.usage["total"]
            replayed = f" ({total['cached_calls']} of {total['calls']} calls cached)" if total["cached_calls"] else ""
            self.console.print(
                f"{indent}[bold green]{event.finish_reason}[/] after {event.iterations} iterations, "
                f"{event.duration:.2f} s, ${total['cost']:.4f}{replayed}"
            )
            if event.depth == 0:
                self.console.print(Panel(cut(event.response, 4000), title="answer"), markup=False)
