"""A spinner and one status line on a rich console that leaves ``sys.stdout`` and ``sys.stderr`` alone.

`rich.console.Console.status` redirects both streams into its live display while it runs. The `local`
sandbox also replaces them, with a per-thread router whose fallback is the stream it found; the two then
write into each other without end (``rlm ask --environment local`` on a terminal hung on its first cell).
Nothing else prints while the line is shown (diagnostics come before, the answer after), so no redirect
is needed.
"""

from __future__ import annotations

from types import TracebackType

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner


class StatusLine:
    """A transient spinner line on `console`; `update` replaces the text next to the spinner."""

    def __init__(self, console: Console, text: RenderableType, spinner: str = "dots") -> None:
        self._spinner = Spinner(spinner, text=text, style="status.spinner")
        self._live = Live(
            self._spinner,
            console=console,
            transient=True,
            refresh_per_second=12.5,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    @property
    def renderable(self) -> RenderableType:
        """What the line draws: the spinner and its text."""
        return self._spinner

    def update(self, status: RenderableType) -> None:
        """Show `status` beside the spinner (a renderable is re-rendered on every refresh)."""
        self._spinner.update(text=status)

    def pause(self, paused: bool) -> None:
        """Take the line off the terminal while something else is asked there (True); put it back (False)."""
        if paused:
            self._live.stop()
        else:
            self._live.start()

    def __enter__(self) -> StatusLine:
        self._live.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._live.stop()
