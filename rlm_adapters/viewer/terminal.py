"""The trajectory as a tree in the terminal (`rlm view RUN.jsonl`).

Every text from the log is shown through `escape_controls` (`_clip`, `_esc`) and as rich `Text`, so no
terminal sequence or rich markup a model, model code or a hostile log put in it acts on the terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.syntax import Syntax
from rich.text import Text
from rich.tree import Tree

from rlm_adapters._terminal import escape_controls
from rlm_adapters.viewer.findings import Findings
from rlm_adapters.viewer.log_build import load
from rlm_adapters.viewer.log_tree import Batch, Cell, Iteration, Run, Trajectory

PREVIEW_CHARS = 300
PREVIEW_LINES = 8


def _clip(text: str, full: bool, chars: int = PREVIEW_CHARS, lines: int = PREVIEW_LINES) -> str:
    """`text` as shown, escaped: whole with `--full`, else its first lines and characters with what was left out."""
    text = text.rstrip()
    if full:
        return escape_controls(text)
    kept = "\n".join(text.splitlines()[:lines])[:chars]
    hidden = len(text) - len(kept)
    kept = escape_controls(kept)
    return kept if hidden <= 0 else f"{kept} … [+{hidden:,} chars]"


def _esc(text: str) -> str:
    """A short value from the log (a model name, a kind, an id) on one line, escaped."""
    return escape_controls(text, one_line=True)


def _secs(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def _tokens(input_tokens: int, output_tokens: int) -> str:
    return f"{input_tokens:,} in / {output_tokens:,} out tok"


def _money(cost: float) -> str:
    return f"${cost:.4f}"


def _batch_node(parent: Tree, batch: Batch, full: bool) -> None:
    label = Text()
    label.append(f"{_esc(batch.kind)} × {len(batch.calls)}", style="bold magenta")
    if batch.size > len(batch.calls):
        label.append(f" of {batch.size}")
    label.append(f" · {_esc(batch.model)}")
    spread = batch.latencies()
    if spread is not None:
        low, mid, high = spread
        label.append(f" · latency {_secs(low)} / {_secs(mid)} / {_secs(high)} (min/median/max)")
    label.append(f" · {_tokens(*batch.tokens())} · {_money(batch.cost)}")
    if batch.finished < len(batch.calls):
        label.append(f" · {len(batch.calls) - batch.finished} running", style="yellow")
    if batch.errors:
        label.append(f" · {batch.errors} failed", style="red")
    node = parent.add(label)
    shown = batch.calls if full else batch.calls[:1]
    for call in shown:
        item = node.add(Text(f"prompt: {_clip(call.prompt, full, 160, 3)}", style="dim"))
        if call.error is not None:
            item.add(Text(f"error: {_clip(call.error, full, 160, 3)}", style="red"))
        elif call.response is not None:
            item.add(Text(f"→ {_clip(call.response, full, 160, 3)}"))
    if len(batch.calls) > len(shown):
        node.add(Text(f"… {len(batch.calls) - len(shown)} more calls (--full shows them)", style="dim"))


def _cell_node(parent: Tree, cell: Cell, full: bool) -> None:
    title = "cell (running)" if cell.running else f"cell {cell.index}"
    label = Text(title, style="bold cyan")
    label.append(f" · {_secs(cell.end - cell.start)}")
    if cell.timed_out:
        label.append(" · timed out", style="red")
    if cell.final:
        label.append(" · final", style="green")
    node = parent.add(label)
    if cell.code:
        node.add(Syntax(_clip(cell.code, full, 2000, 30), "python", theme="ansi_dark", word_wrap=True))
    if cell.output:
        node.add(Group(Text("output:", style="dim"), Text(_clip(cell.output, full))))
    if cell.error:
        node.add(Text(f"error: {_clip(cell.error, full)}", style="red"))
    for batch in cell.batches:
        _batch_node(node, batch, full)
    for child in cell.children:
        _run_node(node, child, full)


def _iteration_node(parent: Tree, item: Iteration, full: bool) -> None:
    label = Text(f"iteration {item.number}", style="bold")
    if item.turn is not None:
        turn = item.turn
        label.append(f" · {_esc(turn.model)} · {_secs(turn.end - turn.start)}")
        label.append(f" · {_tokens(turn.input_tokens, turn.output_tokens)} · {_money(turn.cost)}")
    node = parent.add(label)
    if item.turn is not None and (full or not item.cells):
        # The reply's code shows as cells; the reply itself only when it ran none (or with --full).
        node.add(Text(f"reply: {_clip(item.turn.reply, full)}", style="italic"))
    for cell in item.cells:
        _cell_node(node, cell, full)


def _run_label(run: Run) -> Text:
    direct = run.route == "direct"
    label = Text("direct call " if direct else "RLM " if run.depth == 0 else "nested RLM ", style="bold blue")
    label.append(_esc(run.run_id[:8]), style="bold")
    label.append(f" · depth {run.depth} · {_esc(run.root_model) or '?'}")
    if run.route_reason and (direct or "refused" in run.route_reason):  # why it was direct, or fell back
        label.append(f" · {_esc(run.route_reason)}", style="dim")
    if run.finished:
        label.append(f" · {_esc(run.finish_reason or '')}", style="green" if run.finish_reason == "final" else "yellow")
        label.append(f" · {len(run.iterations)} iterations")
        if run.end is not None:
            label.append(f" · {_secs(run.end - run.start)}")
    else:
        label.append(" · running", style="yellow")
    return label


def _run_node(parent: Tree | None, run: Run, full: bool) -> Tree:
    node = Tree(_run_label(run)) if parent is None else parent.add(_run_label(run))
    if run.query:
        node.add(Text(f"query: {_clip(run.query, full)}"))
    if run.context:
        node.add(Text(f"context: {_describe_context(run.context)}", style="dim"))
    for item in run.iterations:
        _iteration_node(node, item, full)
    for message in run.budget_messages:
        node.add(Text(f"budget: {_esc(message)}", style="yellow"))
    if run.finished:
        answer = node.add(Text("answer: ", style="bold green") + Text(_clip(run.response or "", full)))
        if run.error:
            answer.add(Text(f"error: {_clip(run.error, True)}", style="red"))
    return node


def _findings_node(parent: Tree, findings: Findings, full: bool) -> None:
    """The run's cited sources and its unsupported claims, under the top-level run."""
    label = Text("sources: ", style="bold green")
    label.append(
        ", ".join(map(_esc, findings.sources)) if findings.sources else f"none ({_esc(findings.note or 'not known')})"
    )
    node = parent.add(label)
    if findings.sources and findings.note:
        node.add(Text(_esc(findings.note), style="dim"))
    if findings.unsupported:
        flagged = node.add(Text(f"unsupported claims ({len(findings.unsupported)}):", style="bold yellow"))
        for text, why in findings.unsupported:
            flagged.add(Text(f"{_clip(text, full, 120, 1)} ({_esc(why)})", style="yellow"))
    elif findings.supported:
        node.add(Text(f"all {findings.supported} claims supported", style="green"))


def _describe_context(context: dict[str, object]) -> str:
    parts = [_esc(str(context.get("type", "?")))]
    for key in ("total_chars", "items", "lines"):
        value = context.get(key)
        if isinstance(value, int):
            parts.append(f"{value:,} {key.replace('total_', '')}")
    return ", ".join(parts)


def _summary(trajectory: Trajectory) -> Text:
    usage = trajectory.root.usage
    out = Text("usage: ", style="bold")
    if not usage:
        out.append("not known yet (the run has not finished)")
        return out
    # "sub" counts every model call below the top root, nested runs' root turns included.
    labels = {"total": "total", "root": "root (depth 0)", "sub": "other model calls (incl. nested roots)"}
    for role, label in labels.items():
        part = usage.get(role) or {}
        out.append(
            f"{label} {part.get('calls', 0)} calls, "
            f"{_tokens(int(part.get('input_tokens', 0)), int(part.get('output_tokens', 0)))}, "
            f"{_money(float(part.get('cost', 0.0)))}; "
        )
    return out


def render(trajectory: Trajectory, *, full: bool = False) -> RenderableType:
    """The tree of a trajectory (with a usage line) as one rich renderable.

    Args:
        trajectory: The built log.
        full: Show every text and every sub-call untruncated.
    """
    tree = _run_node(None, trajectory.root, full)
    if trajectory.findings is not None:
        _findings_node(tree, trajectory.findings, full)
    parts: list[RenderableType] = [tree, _summary(trajectory)]
    if trajectory.path is not None:
        parts.insert(0, Text(_esc(str(trajectory.path)), style="dim"))
    return Group(*parts)


def show(path: str | Path, console: Console | None = None, *, full: bool = False) -> None:
    """Print the tree of the log at `path`."""
    (console or Console()).print(render(load(path), full=full))


def follow(
    path: str | Path,
    console: Console | None = None,
    *,
    full: bool = False,
    interval: float = 0.5,
    wait: Callable[[float], None] = time.sleep,
    max_polls: int | None = None,
) -> Trajectory:
    """Show a log that is still being written, redrawn as it grows, until its top-level run ends.

    Args:
        path: The log file.
        console: Where to draw (a new console on stdout by default).
        full: Show every text untruncated.
        interval: Seconds between looks at the file.
        wait: Called with `interval` between looks (tests pass a function that appends to the log).
        max_polls: Stop after this many looks even if the run has not ended.

    Returns:
        The trajectory as last read.
    """
    console = console or Console()
    trajectory = load(path)
    size = Path(path).stat().st_size
    polls = 0
    with Live(render(trajectory, full=full), console=console, auto_refresh=False) as live:
        while not trajectory.finished and (max_polls is None or polls < max_polls):
            wait(interval)
            polls += 1
            new_size = Path(path).stat().st_size
            if new_size != size:
                size = new_size
                trajectory = load(path)
                live.update(render(trajectory, full=full), refresh=True)
    return trajectory
