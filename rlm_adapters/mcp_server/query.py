"""What one `rlm_query` call does: check its arguments, read its files, run the RLM, shape the answer.

Kept apart from the MCP wiring (`server.py`) so that it reads as plain async Python: every refusal is an
`RLMError` (or `ValueError`) with a one-line message that the server turns into a tool error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
from pydantic import BaseModel, Field

from rlm_adapters.core.budget_hook import OnBudget
from rlm_adapters.core.cache import CallCache
from rlm_adapters.core.events import Callback, FinishReason
from rlm_adapters.core.output import OutputSchema
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.trajectory import RLMLogger
from rlm_adapters.errors import ConfigurationError, QueryError
from rlm_adapters.files import LoadResult
from rlm_adapters.mcp_server.config import ServerConfig
from rlm_adapters.mcp_server.inputs import build_context, load_inputs
from rlm_adapters.model_flags import MODEL_VARIABLES
from rlm_adapters.sources import Claim, Place, Source, SourceTracker, sources_block

if TYPE_CHECKING:  # the engine loads at the first call (`build_rlm`), not while the server starts
    from rlm_adapters.core.rlm import RLM

logger = logging.getLogger("rlm_adapters.mcp_server")
TRAJECTORY_URI = "rlm://trajectories/{id}"
# How long a cancelled call waits for the engine to cancel its sub-calls and close its sandbox.
CLEANUP_SECONDS = 5.0


class FileRead(BaseModel):
    """A file the run was given."""

    path: str
    size: int
    invalid_utf8: bool = Field(description="The file was not valid UTF-8 and was decoded with replacement")


class FileSkipped(BaseModel):
    """A file that was found but not given to the run."""

    path: str
    reason: str


class PlaceCited(BaseModel):
    """Where a span lies in a document converted to text, in its own terms."""

    kind: Literal["page", "slide", "sheet", "cell"]
    start: str = Field(description="The first page, slide, sheet or cell")
    end: str | None = Field(default=None, description="The last one, when the span crosses several")
    line_start: int | None = Field(default=None, description="First line inside its one page, slide or cell, from 1")
    line_end: int | None = Field(default=None, description="Last line inside it (inclusive)")


class SourceCited(BaseModel):
    """A span of the input that reached a model and supports the answer."""

    path: str = Field(description="The file (as in files_read), or 'text' for the inline text")
    line_start: int = Field(description="First line, counted from 1")
    line_end: int = Field(description="Last line (inclusive)")
    chars: int = Field(description="Characters in the span")
    excerpt: str = Field(description="The span's text, cut to about 240 characters")
    place: PlaceCited | None = Field(default=None, description="Its page, slide, sheet or cell, if any")

    def as_source(self) -> Source:
        """The `Source` this was made from."""
        place = None if self.place is None else Place(**self.place.model_dump())
        return Source(self.path, self.line_start, self.line_end, self.chars, self.excerpt, place)


class ClaimChecked(BaseModel):
    """One claim of the answer (a number, name, quote or sentence), checked against the input read."""

    text: str
    kind: Literal["number", "name", "quote", "sentence"]
    status: Literal["supported", "unsupported"] = Field(
        description="supported: text that reached a model holds it; unsupported: none does, check it"
    )
    start: int = Field(description="Where the claim starts in the answer")
    end: int = Field(description="Where it ends")
    source: SourceCited | None = Field(default=None, description="The input span that holds it, if any")
    reason: str | None = Field(default=None, description="Why it is unsupported, or what alone supports it")
    via: Literal["input", "output"] | None = Field(
        default=None,
        description="input: a span of the input a model read holds it; output: only what the run's code "
        "printed or wrote does (check the computation)",
    )

    def as_claim(self) -> Claim:
        """The `Claim` this was made from."""
        source = None if self.source is None else self.source.as_source()
        return Claim(self.text, self.kind, self.status, self.start, self.end, source, self.reason, self.via)


class RLMQueryOutput(BaseModel):
    """The structured result of `rlm_query`."""

    answer: str
    finish_reason: FinishReason = Field(
        description="final (answered), max_iterations, budget, timeout, error or cancelled"
    )
    error: str | None = None
    iterations: int
    sub_calls: int
    usage: dict[str, Any] = Field(description="Calls, tokens and cost: total, root, sub and by model")
    cost_usd: float
    elapsed_seconds: float
    files_read: list[FileRead] = Field(default_factory=list)
    files_skipped: list[FileSkipped] = Field(default_factory=list)
    bytes_read: int = 0
    sources: list[SourceCited] = Field(
        default_factory=list,
        description="Where the answer comes from: spans that reached a model and support it, best first",
    )
    claims: list[ClaimChecked] = Field(
        default_factory=list,
        description="The answer's numbers, names, quotes and sentences, each supported by an input span or not",
    )
    sources_note: str | None = Field(
        default=None, description="Why there are no sources (or only the ranges read), and what was not checked"
    )
    trajectory_id: str
    trajectory_uri: str | None = Field(None, description="Read it as a resource to see how the answer was found")
    value: Any = Field(None, description="With output_schema: the validated answer (null when none was valid)")


def ceiling(name: str, requested: float | None, limit: float | None, flag: str) -> float | None:
    """The call's own limit, refused when it is above the server's ceiling."""
    if requested is None:
        return limit
    if requested <= 0:
        raise QueryError(f"{name}={requested!r} must be positive")
    if limit is not None and requested > limit:
        raise QueryError(f"{name}={requested!r} is above this server's ceiling of {limit!r} ({flag})")
    return requested


def check_depth(requested: int | None, limit: int) -> int:
    """The call's recursion depth (0 disables sub-calls), at most the server's."""
    if requested is None:
        return limit
    if requested < 0:
        raise QueryError(f"max_depth={requested!r} must be 0 or more")
    if requested > limit:
        raise QueryError(f"max_depth={requested!r} is above this server's ceiling of {limit} (--max-depth)")
    return requested


def build_rlm(
    config: ServerConfig,
    *,
    model: str | None,
    sub_model: str | None,
    max_depth: int | None,
    max_cost: float | None,
    timeout: float | None,
    persistent: bool = False,
    backends: dict[str, Any] | None = None,
    cache: CallCache | None = None,
) -> RLM:
    """An `RLM` for one call (or, `persistent`, for one session), its limits within the server's ceilings
    (`backends`: model clients to use instead of the configured model, e.g. the MCP client's own; `cache`:
    the server's call cache, not used with `backends`, whose replies are the client's).

    Raises:
        ConfigurationError: no usable model or key; the message names the variables to set.
        QueryError: a limit is invalid or above the server's ceiling.
    """
    depth = check_depth(max_depth, config.max_depth)
    cost = ceiling("max_cost", max_cost, config.max_cost, "--max-cost")
    seconds = ceiling("timeout", timeout, config.timeout, "--timeout")
    options = backends if backends is not None else config.model_kwargs(model, sub_model)
    from rlm_adapters.core.rlm import RLM  # deferred: the server answers its first requests without the engine

    try:
        return RLM(
            **options,
            max_depth=depth,
            max_cost=cost,
            timeout=seconds,
            environment=config.sandbox,
            max_iterations=config.max_iterations,
            logger=RLMLogger(config.log_dir),
            persistent=persistent,
            cache=cache if backends is None else None,
        )
    except ConfigurationError as exc:
        # A missing key surfaces here (the clients are built up front); say which variables fix it.
        raise ConfigurationError(f"{exc}; set {MODEL_VARIABLES}") from exc


async def run_query(
    config: ServerConfig,
    *,
    query: str,
    paths: Sequence[str] | None,
    text: str | None,
    roots: Sequence[Path],
    rlm_options: dict[str, Any],
    callbacks: Sequence[Callback] = (),
    output_schema: dict[str, Any] | None = None,
    session: Callable[[dict[str, Any]], AbstractAsyncContextManager[RLM]] | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    on_files: Callable[[int], Awaitable[None]] | None = None,
    run_id: str | None = None,
    on_converting: Callable[[str], Coroutine[Any, Any, None]] | None = None,
    cache: CallCache | None = None,
    on_budget: OnBudget | None = None,
    loaded: LoadResult | None = None,
) -> tuple[RLMResult, RLMQueryOutput]:
    """Check, load and run one call; the result and its structured summary.

    `loaded`, given, is the context already read (``rlm_recall``'s transcripts): `paths` are then not read.

    `limiter` bounds the threads that read files (the server passes one shared by all its calls);
    `on_files` hears how many files were read, before the run starts; `on_converting`, the count of
    documents converted so far (``converting 3/40 PDFs``); `session`, given, leases the
    persistent `RLM` of the caller's session for these options, held until the call ends; `run_id` is
    the run's (and its trajectory's) id; `output_schema` (a JSON schema, checked
    before anything is read) makes the run's answer a validated value.

    Cancelling the task running this stops the run: the engine cancels outstanding sub-calls and closes
    the sandbox before the cancellation propagates.
    """
    if not query.strip():
        raise QueryError("`query` is empty; say what to find out about the paths or text")
    schema = None if output_schema is None else OutputSchema.of(output_schema, "output_schema")
    # Configuration first: a server without a model refuses before it reads a single file. In a thread:
    # the first call imports the provider's SDK (seconds), which must not stall other calls or progress.
    async with contextlib.AsyncExitStack() as held:
        if session is not None:
            # Held for the whole call: a session with a call in flight is never closed under it.
            rlm = await held.enter_async_context(session(rlm_options))
        else:
            rlm = await asyncio.to_thread(partial(build_rlm, config, **rlm_options, cache=cache))
        return await _run(
            config,
            rlm,
            query,
            paths,
            text,
            roots,
            callbacks,
            limiter,
            on_files,
            run_id,
            session is not None,
            schema=schema,
            on_budget=on_budget,
            on_converting=on_converting,
            loaded=loaded,
        )


async def run_turn(
    config: ServerConfig,
    rlm: RLM,
    *,
    query: str,
    paths: Sequence[str] | None,
    text: str | None,
    roots: Sequence[Path],
    output_schema: dict[str, Any] | None = None,
    limiter: anyio.CapacityLimiter | None = None,
) -> RLMResult:
    """Run one earlier call of a session again in its (new) persistent `rlm`, as that call ran it."""
    schema = None if output_schema is None else OutputSchema.of(output_schema, "output_schema")
    result, _output = await _run(config, rlm, query, paths, text, roots, (), limiter, None, None, True, schema=schema)
    return result


async def _run(
    config: ServerConfig,
    rlm: RLM,
    query: str,
    paths: Sequence[str] | None,
    text: str | None,
    roots: Sequence[Path],
    callbacks: Sequence[Callback],
    limiter: anyio.CapacityLimiter | None,
    on_files: Callable[[int], Awaitable[None]] | None,
    run_id: str | None,
    in_session: bool,
    *,
    schema: OutputSchema | None = None,
    on_converting: Callable[[str], Coroutine[Any, Any, None]] | None = None,
    on_budget: OnBudget | None = None,
    loaded: LoadResult | None = None,
) -> tuple[RLMResult, RLMQueryOutput]:
    """`run_query` once its `RLM` is at hand."""
    started = time.perf_counter()
    seconds = rlm.limits.timeout
    if loaded is None:
        loaded = await load_inputs(
            paths, text, roots, config.max_bytes, timeout=seconds, limiter=limiter, on_converting=on_converting
        )
    if seconds is not None and not in_session:
        # Reading the files counts towards the call's timeout: the run gets what is left. (Not for a
        # session's RLM: it is shared by the session's calls, and each must start from its full timeout.)
        left = max(seconds - (time.perf_counter() - started), 0.001)
        rlm.limits = dataclasses.replace(rlm.limits, timeout=left)
    if on_files is not None and loaded is not None:
        await on_files(len(loaded.files))
    # The run gets its own task: the MCP SDK cancels a handler through an anyio cancel scope, which would
    # cancel every await of the engine's cleanup too (leaving the sandbox worker running). A plain task
    # sees one cancellation, cleans up, and is awaited below under a shield.
    context = build_context(loaded, text)
    tracker = SourceTracker(context, max_output_chars=rlm.max_output_chars, text_name="text")
    tracker.start()  # what reaches a model is matched while the run works
    run = asyncio.create_task(
        rlm.acompletion(
            context,
            query,
            callbacks=[*callbacks, tracker.on_event],
            run_id=run_id,
            output_schema=schema,
            on_budget=on_budget,
        ),
        name="rlm-mcp-run",
    )
    try:
        result = await asyncio.shield(run)
    except asyncio.CancelledError:
        run.cancel()
        tracker.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({run}, timeout=CLEANUP_SECONDS)
        logger.info("rlm_query cancelled after %.2fs; the run was stopped", time.perf_counter() - started)
        raise
    except BaseException:
        tracker.cancel()
        raise
    await tracker.apply(result)
    return result, summarize(result, loaded, config.log_dir)


def summarize(result: RLMResult, loaded: LoadResult | None, log_dir: Path) -> RLMQueryOutput:
    """The structured content of a finished call."""
    return RLMQueryOutput(
        answer=result.response,
        finish_reason=result.finish_reason,
        error=result.error,
        iterations=result.iterations,
        sub_calls=int(result.metadata.get("sub_calls", 0)),
        usage=result.usage_summary.to_dict(),
        cost_usd=round(result.cost, 8),
        elapsed_seconds=round(result.execution_time, 3),
        files_read=[FileRead(path=f.path, size=f.size, invalid_utf8=f.invalid_utf8) for f in loaded.files]
        if loaded
        else [],
        files_skipped=[FileSkipped(path=s.path, reason=s.reason) for s in loaded.skipped] if loaded else [],
        bytes_read=loaded.total_bytes if loaded else 0,
        sources=[SourceCited(**source.to_dict()) for source in result.sources],
        claims=[ClaimChecked(**claim.to_dict()) for claim in result.claims],
        sources_note=result.sources_note,
        trajectory_id=result.run_id,
        trajectory_uri=TRAJECTORY_URI.format(id=result.run_id) if result.trajectory_file else None,
        value=result.value,
    )


def answer_text(output: RLMQueryOutput) -> str:
    """The text content: the answer (with a first line saying so when the run stopped early), then a
    ``Sources:`` block of ``path:start-end`` lines (and an ``Unsupported:`` line naming the claims no input
    that reached a model holds)."""
    if output.finish_reason == "final":
        text = output.answer
    else:
        why = f"{output.finish_reason}: {output.error}" if output.error else output.finish_reason
        partial = output.answer or "(no partial answer)"
        text = f"[the run stopped before a final answer ({why}); best partial answer follows]\n{partial}"
    block = sources_block(
        [s.as_source() for s in output.sources], [c.as_claim() for c in output.claims], output.sources_note
    )
    return f"{text}\n\n{block}" if block else text
