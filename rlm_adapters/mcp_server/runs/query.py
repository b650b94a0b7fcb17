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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from rlm_adapters.core import Account, Callback, OnBudget, OutputSchema, RLMLogger, RLMResult, RunObserver
from rlm_adapters.core.cache import CallCache
from rlm_adapters.errors import ConfigurationError, QueryError
from rlm_adapters.files import LoadResult
from rlm_adapters.flags import unpriced_lines
from rlm_adapters.mcp_server.runs.inputs import build_context, load_inputs
from rlm_adapters.mcp_server.runs.results import RLMQueryOutput, summarize
from rlm_adapters.mcp_server.setup.config import ServerConfig
from rlm_adapters.model_flags import MODEL_VARIABLES
from rlm_adapters.sources import SourceTracker

if TYPE_CHECKING:  # the engine loads at the first call (`build_rlm`), not while the server starts
    from rlm_adapters.core import RLM

logger = logging.getLogger("rlm_adapters.mcp_server")
# How long a cancelled call waits for the engine to cancel its sub-calls and close its sandbox.
CLEANUP_SECONDS = 5.0


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


# The arguments of ``rlm_query`` that shape the call's `RLM` (`build_rlm`'s keywords of those names).
RUN_ARGUMENTS = ("model", "sub_model", "max_depth", "max_cost", "run_timeout", "timeout")


def build_rlm(
    config: ServerConfig,
    *,
    model: str | None,
    sub_model: str | None,
    max_depth: int | None,
    max_cost: float | None,
    run_timeout: float | None = None,
    timeout: float | None = None,
    persistent: bool = False,
    backends: dict[str, Any] | None = None,
    cache: CallCache | None = None,
) -> RLM:
    """An `RLM` for one call (or, `persistent`, for one session), its limits within the server's ceilings
    (`backends`: model clients to use instead of the configured model, e.g. the MCP client's own; `cache`:
    the server's call cache, not used with `backends`, whose replies are the client's; `timeout`: the older
    name of `run_timeout`).

    Raises:
        ConfigurationError: no usable model or key; the message names the variables to set.
        QueryError: a limit is invalid or above the server's ceiling.
    """
    depth = check_depth(max_depth, config.max_depth)
    cost = ceiling("max_cost", max_cost, config.max_cost, "--max-cost")
    if run_timeout is not None and timeout is not None:
        raise QueryError(f"give run_timeout={run_timeout!r} or timeout={timeout!r}, not both (the same limit)")
    name = "timeout" if timeout is not None else "run_timeout"
    seconds = ceiling(name, run_timeout if timeout is None else timeout, config.run_timeout, "--run-timeout")
    options = backends if backends is not None else config.model_kwargs(model, sub_model)
    from rlm_adapters.core import RLM

    try:
        rlm = RLM(
            **options,
            **config.options,
            max_depth=depth,
            max_cost=cost,
            run_timeout=seconds,
            environment=config.sandbox,
            max_iterations=config.max_iterations,
            max_reply_tokens=config.max_reply_tokens,
            direct_below_tokens=config.direct_below_tokens,
            cell_timeout=config.cell_timeout,
            sources_timeout=config.sources_timeout,
            logger=RLMLogger(config.log_dir),
            persistent=persistent,
            cache=cache if backends is None else None,
            raise_on_error=False,  # a failed run is a tool error that still carries its usage and run id
        )
    except ConfigurationError as exc:
        # A missing key surfaces here (the clients are built up front); say which variables fix it.
        raise ConfigurationError(f"{exc}; set {MODEL_VARIABLES}") from exc
    if cost is not None:  # said before the first call, in the operator's words: the fix is rlm-mcp's --price
        for line in unpriced_lines([rlm.root_model_name, *rlm.sub_model_names], rlm.prices):
            logger.warning("%s", line)
    return rlm


async def run_query(
    config: ServerConfig,
    *,
    query: str,
    paths: Sequence[str] | None,
    text: str | None,
    roots: Sequence[Path],
    rlm_options: dict[str, Any],
    callbacks: Sequence[Callback] = (),
    observers: Sequence[RunObserver] = (),
    output_schema: dict[str, Any] | None = None,
    session: Callable[[dict[str, Any]], AbstractAsyncContextManager[RLM]] | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    on_files: Callable[[int], Awaitable[None]] | None = None,
    run_id: str | None = None,
    on_converting: Callable[[str], Coroutine[Any, Any, None]] | None = None,
    cache: CallCache | None = None,
    on_budget: OnBudget | None = None,
    loaded: LoadResult | None = None,
    account: Account | None = None,
) -> tuple[RLMResult, RLMQueryOutput]:
    """Check, load and run one call; the result and its structured summary.

    `loaded`, given, is the context already read (``rlm_recall``'s transcripts): `paths` are then not read.

    `limiter` bounds the threads that read files (the server passes one shared by all its calls);
    `on_files` hears how many files were read, before the run starts; `on_converting`, the count of
    documents converted so far (``converting 3/40 PDFs``); `observers` watch the run beside its sources
    (the progress reporter's, which says "finding sources" once the answer exists); `session`, given, leases the
    persistent `RLM` of the caller's session for these options, held until the call ends; `run_id` is
    the run's (and its trajectory's) id; `output_schema` (a JSON schema, checked
    before anything is read) makes the run's answer a validated value.

    Cancelling the task running this stops the run: the engine cancels outstanding sub-calls and closes
    the sandbox before the cancellation propagates.
    """
    if not query.strip():
        raise QueryError("`query` is empty; say what to find out about the paths or text")
    # On a worker thread: a schema of 10,000 subschemas takes a while to bound (issue 48), and this is the
    # server's loop, which every other client's call shares.
    schema = None if output_schema is None else await asyncio.to_thread(OutputSchema.of, output_schema, "output_schema")
    # Configuration first: a server without a model refuses before it reads a single file. In a thread:
    # the first call imports the provider's SDK (seconds), which must not stall other calls or progress.
    async with contextlib.AsyncExitStack() as held:
        if session is not None:
            # Held for the whole call: a session with a call in flight is never closed under it.
            rlm = await held.enter_async_context(session(rlm_options))
        else:
            rlm = await asyncio.to_thread(partial(build_rlm, config, **rlm_options, cache=cache))
        call = Call(
            query,
            paths,
            text,
            tuple(roots),
            schema,
            tuple(callbacks),
            limiter,
            observers=tuple(observers),
            in_session=session is not None,
            on_files=on_files,
            on_converting=on_converting,
            run_id=run_id,
            on_budget=on_budget,
            loaded=loaded,
            account=account,
        )
        return await _run(config, rlm, call)


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
    schema = None if output_schema is None else await asyncio.to_thread(OutputSchema.of, output_schema, "output_schema")
    call = Call(query, paths, text, tuple(roots), schema, (), limiter, in_session=True)
    result, _output = await _run(config, rlm, call)
    return result


@dataclass(frozen=True)
class Call:
    """One call's run, prepared once by `run_query` (or `run_turn`) and handed to `_run` whole.

    Attributes:
        query: The question.
        paths: The paths and globs to read (None: none).
        text: The text given inline (None: none).
        roots: The folders `paths` may be under.
        schema: The answer's checked type (None: text).
        callbacks: The run's extra event callbacks.
        limiter: Bounds the threads that read files (one shared by all the server's calls).
        observers: What watches the run beside its sources (the progress reporter's observer).
        in_session: The `RLM` is a session's, shared by its calls: each starts from its full timeout.
        on_files: Hears how many files were read, before the run starts.
        on_converting: Hears the count of documents converted so far.
        run_id: The run's (and its trajectory's) id.
        on_budget: The budget hook of the run.
        loaded: The context already read (``rlm_recall``'s transcripts): `paths` are then not read.
        account: Who else pays for the run's calls (a store's key), or None.
    """

    query: str
    paths: Sequence[str] | None
    text: str | None
    roots: tuple[Path, ...]
    schema: OutputSchema | None = None
    callbacks: tuple[Callback, ...] = ()
    limiter: anyio.CapacityLimiter | None = None
    observers: tuple[RunObserver, ...] = ()
    in_session: bool = False
    on_files: Callable[[int], Awaitable[None]] | None = None
    on_converting: Callable[[str], Coroutine[Any, Any, None]] | None = None
    run_id: str | None = None
    on_budget: OnBudget | None = None
    loaded: LoadResult | None = None
    account: Account | None = None


async def _run(config: ServerConfig, rlm: RLM, call: Call) -> tuple[RLMResult, RLMQueryOutput]:
    """`run_query` once its `RLM` is at hand."""
    started = time.perf_counter()
    seconds = rlm.limits.timeout
    loaded, text = call.loaded, call.text
    if loaded is None:
        loaded = await load_inputs(
            call.paths,
            text,
            call.roots,
            config.max_bytes,
            timeout=seconds,
            limiter=call.limiter,
            on_converting=call.on_converting,
        )
    if seconds is not None and not call.in_session:
        # Reading the files counts towards the call's timeout: the run gets what is left. (Not for a
        # session's RLM: it is shared by the session's calls, and each must start from its full timeout.)
        left = max(seconds - (time.perf_counter() - started), 0.001)
        rlm.settings = dataclasses.replace(rlm.settings, limits=dataclasses.replace(rlm.limits, timeout=left))
    if call.on_files is not None and loaded is not None:
        await call.on_files(len(loaded.files))
    # The run gets its own task: the MCP SDK cancels a handler through an anyio cancel scope, which would
    # cancel every await of the engine's cleanup too (leaving the sandbox worker running). A plain task
    # sees one cancellation, cleans up, and is awaited below under a shield.
    context = build_context(loaded, text)
    # The answer's sources and claims: found while the run works, finished within its sources_timeout.
    tracker = SourceTracker(context, max_output_chars=rlm.max_output_chars, text_name="text")
    run = asyncio.create_task(
        rlm.acompletion(
            context,
            call.query,
            callbacks=list(call.callbacks),
            run_id=call.run_id,
            output_schema=call.schema,
            on_budget=call.on_budget,
            observers=[tracker, *call.observers],
            account=call.account,
        ),
        name="rlm-mcp-run",
    )
    try:
        result = await asyncio.shield(run)
    except asyncio.CancelledError:
        run.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({run}, timeout=CLEANUP_SECONDS)
        logger.info("rlm_query cancelled after %.2fs; the run was stopped", time.perf_counter() - started)
        raise
    source = config.cache.name if config.cache is not None else "the call cache"
    # On a worker thread: every text of the result is scanned for control characters, and an answer can be
    # tens of MiB (0.8 s for 64 MiB), which on the loop would hold every other client's call.
    summary = await asyncio.to_thread(summarize, result, loaded, config.log_dir, resumed_from=source)
    return result, summary
