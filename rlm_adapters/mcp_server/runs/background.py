"""Background runs: ``rlm_query(..., background=True)`` returns a run id at once; the run goes on in the server.

``rlm_query(run_id=ID, wait=SECONDS)`` returns the run's result exactly as a direct call would have (or raises
its error), or, while it still works, its progress (`RunStatus`); ``rlm_query(run_id=ID, cancel=True)`` stops
it. A run belongs to its client's `identity.Client.principal`: over stdio (and in-process) the one local
client, over HTTP with ``--token`` whoever holds the token (a client that disconnects and connects again, a
new MCP session, fetches its run by id), and over HTTP without one the MCP session that started it: nobody
else reaches it, and it is cancelled and forgotten when that MCP session ends (`RunBook.watch`).

Ids are 128-bit random (`secrets.token_urlsafe`). An id that is malformed, unknown, expired or another
client's gets one and the same answer, which says nothing about which it was. A client may have
``--max-client-runs`` runs working at once, the server ``--max-runs``; where principals are many (a shared
book: HTTP without a token), one principal never takes more than half of ``--max-runs`` (rounded up), so that a
flood from one leaves slots for the others. Finished results are kept for
``--keep-results-for`` seconds, at most ``--keep-results`` of them (the oldest go first). A waiting call gets
the run's progress notifications while it waits, and its own cancellation never stops the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from rlm_adapters.core.adapter_kit import EventTally
from rlm_adapters.errors import ConfigurationError, QueryError, RLMError
from rlm_adapters.mcp_server.callers import Client
from rlm_adapters.mcp_server.runs.progress import ProgressReporter, SendProgress
from rlm_adapters.mcp_server.runs.store import RunStore, SharedRun, StoredRun

if TYPE_CHECKING:  # psycopg loads only for a --store
    from rlm_adapters.mcp_server.runs.shared_store import SharedRunStore

logger = logging.getLogger("rlm_adapters.mcp_server")

# `secrets.token_urlsafe(16)`: 16 random bytes, 22 URL-safe characters.
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{22}$")
UNKNOWN_RUN = (
    "run_id {run_id!r} names no run you can reach (unknown, expired, or not yours): start it again with background=true"
)
# How often a run working on another replica is read from the store while a caller here waits for it.
FOLLOW_FIRST_SECONDS = 0.2
FOLLOW_MOST_SECONDS = 2.0


@dataclass(frozen=True)
class RunLimits:
    """How many background runs may work at once and how long their results are kept.

    Attributes:
        max_per_client: Runs working at once for one client (its principal).
        max_running: Runs working at once, all clients together.
        keep_results: Finished results kept (the oldest are forgotten first).
        keep_seconds: Seconds a finished result is kept.
        names: How the interface spells each limit in messages (its flags).
    """

    max_per_client: int = 4
    max_running: int = 16
    keep_results: int = 64
    keep_seconds: float = 3600.0
    names: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for limit in ("max_per_client", "max_running", "keep_results"):
            value = getattr(self, limit)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"{self.name(limit)} {value!r} must be an integer >= 1")
        value = self.keep_seconds
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ConfigurationError(f"{self.name('keep_seconds')} {value!r} must be a positive number of seconds")

    def name(self, limit: str) -> str:
        """The interface's name of `limit` (one of the fields)."""
        return self.names.get(limit, limit)

    @property
    def share(self) -> int:
        """Runs one principal may have working at once where principals are many: `max_per_client`, at most
        half of `max_running` (rounded up; all of a single slot)."""
        return min(self.max_per_client, (self.max_running + 1) // 2)


class RunStatus(BaseModel):
    """What `rlm_query` returns for a background run that has no result yet, or was cancelled."""

    run_id: str = Field(description="Pass it back as run_id to fetch the answer, wait for it, or cancel")
    status: Literal["running", "cancelled"]
    message: str = Field(description="The run's state for a person, e.g. 'iteration 3/30 · 48 sub-calls · $0.12'")
    iteration: int
    sub_calls: int = Field(description="Sub-calls that came back")
    sub_calls_started: int
    cost_usd: float
    elapsed_seconds: float


@dataclass(eq=False)
class Run:
    """One background run: its task, its progress, who may reach it.

    Attributes:
        run_id: Its id (128 random bits).
        owner: The principal that started it (`identity.Client.principal`).
        progress: Its progress reporter, set by the run's work once it has one.
        task: The task doing the work.
        finished_at: When the task ended (the clock's seconds), None while it works.
        cancelled: It was stopped by a cancel (or by the server stopping).
        stopped: The server stopped it (not a cancel): a restart with ``--cache`` runs it again.
        keep_seconds: How long its result is kept once it ends, if not the book's ``keep_seconds`` (an MCP
            task's ttl, never above it).
    """

    run_id: str
    owner: str
    progress: ProgressReporter | None = None
    task: asyncio.Future[CallToolResult] | None = None
    finished_at: float | None = None
    cancelled: bool = False
    stopped: bool = False  # by the server stopping: kept as unfinished for a restart
    keep_seconds: float | None = None
    stored: bool = False  # written to the store (its end is written too)
    elsewhere: str | None = None  # with a shared store: the replica it works on, followed here
    lost: bool = False  # that replica's lease lapsed
    resumed_from: str | None = None  # run again here after that replica was lost
    resume: Callable[[Mapping[str, Any]], Work] | None = field(default=None, repr=False)  # how, once lost
    _listeners: list[SendProgress] = field(default_factory=list, repr=False)

    async def relay(self, progress: float, total: float | None, message: str | None) -> None:
        """The run's progress sender: forwards each notification to the calls waiting for it now."""
        for send in list(self._listeners):
            with contextlib.suppress(Exception):  # a waiter that went away must not stop the run
                await send(progress, total, message)

    def status(self) -> RunStatus:
        """The run's progress now."""
        reporter = self.progress
        tally = reporter.tally if reporter is not None else EventTally()
        message = reporter.message() if reporter is not None else "starting"
        if self.elsewhere is not None:
            message = (
                f"lost: its replica {self.elsewhere} stopped renewing its lease (it stopped, or lost the store); "
                "asking for its result runs it again here, its model calls that came back replaying from the cache"
                if self.lost
                else f"working on replica {self.elsewhere}"
            )
        elif self.resumed_from is not None:
            message = f"run again on this replica after replica {self.resumed_from} was lost · {message}"
        return RunStatus(
            run_id=self.run_id,
            status="cancelled" if self.cancelled else "running",
            message=message,
            iteration=tally.iteration,
            sub_calls=tally.sub_calls_finished,
            sub_calls_started=tally.sub_calls_started,
            cost_usd=round(tally.cost, 8),
            elapsed_seconds=round(tally.elapsed, 3),
        )


# What a background run does, given its `Run` (whose `relay` its progress goes to): the call's result.
Work = Callable[[Run], Coroutine[Any, Any, CallToolResult]]


class RunBook:
    """The background runs of one server, by principal and id.

    Args:
        limits: The caps and how long results are kept.
        clock: Monotonic seconds (tests may pass their own).
        store: Where runs are written down to outlive the server (``--cache``), or shared with the other
            replicas on a ``--store`` (`shared_store.SharedRunStore`), see `server.run_book`.
        shared: Principals are many and cost nothing to make (HTTP without a token): each gets at most
            `RunLimits.share` of the slots.
    """

    def __init__(
        self,
        limits: RunLimits | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        store: RunStore | SharedRunStore | None = None,
        shared: bool = False,
    ) -> None:
        self.limits = limits or RunLimits()
        self._clock = clock
        self.store = store
        self.shared = shared
        self._runs: OrderedDict[tuple[str, str], Run] = OrderedDict()
        self._watched: set[str] = set()

    @property
    def shared_store(self) -> SharedRunStore | None:
        """The store shared with the other replicas (None: no store, or a ``--cache`` folder's)."""
        store = self.store
        return None if store is None or isinstance(store, RunStore) else store

    def watch(self, client: Client) -> None:
        """Tie the runs of `client` to it when its principal does not outlive it (HTTP without a token):
        when its MCP session ends, they are cancelled and forgotten, since nobody could reach them again."""
        if client.durable or client.principal in self._watched:
            return
        self._watched.add(client.principal)
        client.on_end(lambda ended: self.end_owner(ended.principal))

    async def end_owner(self, owner: str) -> None:
        """Cancel every run of `owner` still working, wait until they have stopped, and forget its results."""
        self._watched.discard(owner)
        runs = [run for (who, _id), run in self._runs.items() if who == owner]
        for run in runs:
            if run.task is not None and not run.task.done():
                run.cancelled = True
                run.task.cancel()
        tasks = {run.task for run in runs if run.task is not None}
        if tasks:
            await asyncio.wait(tasks)
        for run in runs:
            self._runs.pop((owner, run.run_id), None)

    def start(self, owner: str, work: Work, arguments: Mapping[str, Any] | None = None) -> Run:
        """Start `work` as a run of `owner` (`arguments`: the call's, written down with a store).

        Raises:
            QueryError: the owner, or the server, has as many runs working as its limit allows.
        """
        self._expire()
        working = [
            run for run in self._runs.values() if run.task is not None and not run.task.done() and not run.elsewhere
        ]
        mine = sum(1 for run in working if run.owner == owner)
        if mine >= self.limits.max_per_client:
            raise QueryError(
                f"{mine} background runs of yours are working ({self.limits.name('max_per_client')} "
                f"{self.limits.max_per_client}): wait for one with run_id=..., wait=..., or cancel one"
            )
        if self.shared and mine >= self.limits.share:
            raise QueryError(
                f"{mine} background runs of yours are working, your share of this server's "
                f"{self.limits.name('max_running')} {self.limits.max_running} (half, so that other clients "
                "keep theirs): wait for one with run_id=..., wait=..., or cancel one"
            )
        if len(working) >= self.limits.max_running:
            raise QueryError(
                f"{len(working)} background runs are working on this server ({self.limits.name('max_running')} "
                f"{self.limits.max_running}): try again when one has finished"
            )
        return self._launch(Run(run_id=secrets.token_urlsafe(16), owner=owner), work, arguments)

    def _launch(self, run: Run, work: Work, arguments: Mapping[str, Any] | None) -> Run:
        if self.store is not None and arguments is not None:
            run.stored = True
            self.store.started(run.run_id, run.owner, arguments)
        task = asyncio.create_task(work(run), name="rlm-mcp-background")
        run.task = task
        task.add_done_callback(lambda _task: self._finished(run))
        self._runs[(run.owner, run.run_id)] = run
        if run.stored:
            self._hold(run)
        return run

    async def written(self) -> None:
        """With a shared store: wait until what was written so far is in it (a run's start, before its id is
        handed out, so that any replica finds it at once)."""
        shared = self.shared_store
        if shared is not None:
            await asyncio.to_thread(shared.flush)

    async def release(self) -> None:
        """The server stops (and may be ended right after, as uvicorn ends it on SIGTERM): what was written is in
        the store; with a shared store this replica gives up its leases, so that another takes its unfinished
        runs and its sessions over at once."""
        if self.store is not None:
            await asyncio.to_thread(self.store.flush)
        shared = self.shared_store
        if shared is not None:
            await asyncio.to_thread(shared.replica.close)

    def _hold(self, run: Run) -> None:
        """With a shared store: the run holds this replica's lease, and stops when another replica cancels it."""
        store = self.shared_store
        if store is None:
            return
        loop = asyncio.get_running_loop()

        def stop() -> None:  # called from the lease thread
            def cancel() -> None:
                if run.task is not None and not run.task.done():
                    run.cancelled = True
                    run.task.cancel()

            with contextlib.suppress(RuntimeError):  # the loop closed: the run has stopped with it
                loop.call_soon_threadsafe(cancel)

        store.hold(run.run_id, stop)

    def get(
        self,
        owner: str,
        run_id: str,
        resume: Callable[[Mapping[str, Any]], Work] | None = None,
        *,
        stored: bool = True,
        found: StoredRun | None = None,
    ) -> Run:
        """`owner`'s run `run_id`; with a store and `stored` (a durable owner), also one an earlier server
        started (its result as it was, or, unfinished, run again by ``resume(arguments)``'s work; `found`: its
        record, read already by `find`).

        Raises:
            QueryError: the same message for an id that is malformed, unknown, expired or another owner's.
        """
        self._expire()
        run = self._runs.get((owner, run_id)) if _RUN_ID.match(run_id) else None
        if run is None and stored and self.store is not None and _RUN_ID.match(run_id):
            record = found if found is not None else self.store.find(owner, run_id)
            run = None if record is None else self._from_record(owner, run_id, record, resume)
        elif run is not None and run.elsewhere is not None and run.resume is None:
            run.resume = resume  # followed before by a caller that could not run it (tasks/list)
        if run is None:
            raise QueryError(UNKNOWN_RUN.format(run_id=run_id[:64]))
        return run

    async def find(
        self,
        owner: str,
        run_id: str,
        resume: Callable[[Mapping[str, Any]], Work] | None = None,
        *,
        stored: bool = True,
        take_over: bool = True,
    ) -> Run:
        """`get`, reading the store in a thread (never on the event loop) when the run is not in memory; with a
        shared store and `take_over`, a run lost with its replica is claimed and run again here at once (else
        followed: `cancel` marks it cancelled in the store).

        Raises:
            QueryError: the same message for an id that is malformed, unknown, expired or another owner's.
            StoreError: the shared store failed or is resting after a failure.
        """
        record = None
        if stored and self.store is not None and (owner, run_id) not in self._runs and _RUN_ID.match(run_id):
            record = await asyncio.to_thread(self.store.find, owner, run_id)
            if record is None:
                raise QueryError(UNKNOWN_RUN.format(run_id=run_id[:64]))
            lost = isinstance(record, SharedRun) and record.state == "working" and record.lost
            if lost and take_over and resume is not None and (owner, run_id) not in self._runs:
                # Taken over now, so that this very answer says it runs here (a follower would say "lost").
                run = Run(run_id=run_id, owner=owner)
                assert isinstance(record, SharedRun)
                if await self._take_over(run, record):  # held here now: it must run here (a follower waits on it)
                    return self._launch(run, resume(record.arguments), None)
        follow_only = not take_over and isinstance(record, SharedRun)  # `--cache`'s unfinished run resumes regardless
        return self.get(owner, run_id, None if follow_only else resume, stored=stored, found=record)

    def _from_record(
        self, owner: str, run_id: str, stored: StoredRun, resume: Callable[[Mapping[str, Any]], Work] | None
    ) -> Run | None:
        run = Run(run_id=run_id, owner=owner)
        if stored.state == "working" and isinstance(stored, SharedRun):
            # Another replica's run, or a lost one: followed in the store, taken over once lost.
            run.elsewhere, run.lost, run.resume = stored.replica, stored.lost, resume
            run.task = asyncio.create_task(self._follow(run, stored), name="rlm-mcp-follow")
            run.task.add_done_callback(lambda _task: self._finished(run))
            self._runs[(owner, run_id)] = run
            return run
        if stored.state == "working":
            if resume is None:
                return None
            return self._launch(run, resume(stored.arguments), stored.arguments)
        ended: asyncio.Future[CallToolResult] = asyncio.get_running_loop().create_future()
        try:
            ended.set_result(_ended_result(stored))
        except asyncio.CancelledError:
            run.cancelled = True
            ended.cancel()
        except ToolError as error:
            ended.set_exception(error)
        run.task, run.finished_at = ended, self._clock()
        self._runs[(owner, run_id)] = run
        return run

    async def _take_over(self, run: Run, stored: SharedRun) -> bool:
        """Claim `run`, lost with its replica, for this one (False: another replica was first)."""
        store = self.shared_store
        assert store is not None
        if not await asyncio.to_thread(store.claim, run.run_id):
            return False
        logger.warning(
            "run %s…: its replica %s was lost; run again on replica %s (its model calls that came back replay from "
            "the cache)",
            run.run_id[:6],
            stored.replica,
            store.replica.id,
        )
        run.elsewhere, run.lost, run.resumed_from, run.stored = None, False, stored.replica, True
        self._hold(run)
        return True

    async def _follow(self, run: Run, stored: SharedRun) -> CallToolResult:
        """A run working on another replica, read from the store (every 0.2 s at first, then at most every 2 s)
        until it ends; once its replica is lost and a caller gave `Run.resume`, claimed and run again here."""
        store = self.shared_store
        assert store is not None
        interval = FOLLOW_FIRST_SECONDS
        while True:
            run.elsewhere, run.lost = stored.replica, stored.lost
            if stored.state != "working":
                run.cancelled = stored.state == "cancelled"
                return _ended_result(stored)
            resume = run.resume
            if stored.lost and resume is not None and await self._take_over(run, stored):
                return await resume(stored.arguments)(run)
            await asyncio.sleep(interval)
            interval = min(interval * 2, FOLLOW_MOST_SECONDS)
            try:
                found = await asyncio.to_thread(store.find, run.owner, run.run_id)
            except RLMError as exc:  # the store is down: the run goes on where it is; keep asking
                logger.debug("following run %s…: %s", run.run_id[:6], exc)
                continue
            if not isinstance(found, SharedRun):
                raise ToolError(UNKNOWN_RUN.format(run_id=run.run_id))
            stored = found

    async def wait(self, run: Run, seconds: float, send: SendProgress | None = None) -> None:
        """Wait up to `seconds` for `run` to finish, forwarding its progress to `send` meanwhile.

        Cancelling the caller stops the waiting, never the run.
        """
        assert run.task is not None
        if run.task.done() or seconds <= 0:
            return
        if send is not None:
            run._listeners.append(send)
        try:
            await asyncio.wait({run.task}, timeout=seconds)
        finally:
            if send is not None:
                run._listeners.remove(send)

    async def cancel(self, run: Run) -> None:
        """Stop `run` and wait until it has stopped (sub-calls cancelled, sandbox closed); idempotent."""
        assert run.task is not None
        store = self.shared_store
        if run.elsewhere is not None and store is not None:
            # Its replica stops it at its next renewal; here, it is cancelled now.
            await asyncio.to_thread(store.cancel, run.owner, run.run_id)
        if not run.task.done():
            run.cancelled = True
            run.task.cancel()
        # Shielded: a client that gives up on the cancel call must not leave the run half stopped.
        await asyncio.shield(asyncio.wait({run.task}))

    async def reach(
        self, run: Run, *, wait: float = 0.0, cancel: bool = False, send: SendProgress | None = None
    ) -> CallToolResult:
        """What a call that reaches `run` returns: after cancelling it, or waiting up to `wait` seconds for it
        (its progress going to `send`), its result as a direct call returns it, else its status."""
        if cancel:
            await self.cancel(run)
        else:
            await self.wait(run, wait, send)
        outcome = self.outcome(run)
        if isinstance(outcome, CallToolResult):
            return outcome
        text = f"run {outcome.run_id} is {outcome.status}: {outcome.message}"
        if outcome.status == "running":
            text += f"; call rlm_query(run_id={outcome.run_id!r}, wait=60) for the answer"
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=outcome.model_dump(mode="json")
        )

    @staticmethod
    def outcome(run: Run) -> CallToolResult | RunStatus:
        """A finished run's result (its error raised again, as a direct call raises it), else its status."""
        task = run.task
        assert task is not None
        if not task.done() or task.cancelled():
            return run.status()
        error = task.exception()
        if isinstance(error, ToolError):
            raise ToolError(str(error)) from error
        if error is not None:
            raise error
        return task.result()

    def knows(self, run: Run) -> bool:
        """Whether `run` is still kept (working, or ended and not yet forgotten)."""
        self._expire()
        return self._runs.get((run.owner, run.run_id)) is run

    def __len__(self) -> int:
        return len(self._runs)

    async def aclose(self) -> None:
        """Stop every run still working (the server is stopping) and forget every result."""
        runs = list(self._runs.values())
        for run in runs:
            if run.task is not None and not run.task.done():
                run.cancelled = run.stopped = True
                run.task.cancel()
        tasks = {run.task for run in runs if run.task is not None}
        if tasks:
            await asyncio.wait(tasks)
        self._runs.clear()
        if self.store is not None:
            await asyncio.to_thread(self.store.close)  # what was written is on disk

    # -- keeping results ----------------------------------------------------------------------------
    def _finished(self, run: Run) -> None:
        task = run.task
        assert task is not None
        error = None if task.cancelled() else task.exception()
        if error is not None:
            # Retrieved here so that a result nobody fetches logs nothing; `outcome` raises it again.
            logger.debug("background run %s ended with an error", run.run_id[:6], exc_info=error)
        run.finished_at = self._clock()
        if self.store is not None and run.stored and not run.stopped:
            # Queued to the store's thread, which turns the result into JSON: nothing heavy on the loop.
            if task.cancelled():
                self.store.ended(run.run_id, run.owner, "cancelled")
            elif isinstance(error, ToolError):
                self.store.ended(run.run_id, run.owner, "failed", error=str(error))
            elif error is None:
                self.store.ended(run.run_id, run.owner, "done", result=task.result())
            # Any other error is a bug, not the call's answer: the run stays unfinished, to be run again.
        self._expire()

    def _expire(self) -> None:
        """Forget results older than `keep_seconds`, then the oldest beyond `keep_results`."""
        now = self._clock()
        finished = [(key, run) for key, run in self._runs.items() if run.finished_at is not None]
        finished.sort(key=lambda item: item[1].finished_at or 0.0)
        extra = len(finished) - self.limits.keep_results
        for index, (key, run) in enumerate(finished):
            assert run.finished_at is not None
            keep = self.limits.keep_seconds if run.keep_seconds is None else run.keep_seconds
            if index < extra or now - run.finished_at > keep:
                del self._runs[key]


def _ended_result(stored: StoredRun) -> CallToolResult:
    """An ended run's result as its record has it: returned, raised (`ToolError`) or cancelled."""
    if stored.state == "done" and stored.result is not None:
        return CallToolResult.model_validate(stored.result)
    if stored.state == "failed":
        raise ToolError(stored.error or "the run failed")
    raise asyncio.CancelledError


__all__ = [
    "UNKNOWN_RUN",
    "Run",
    "RunBook",
    "RunLimits",
    "RunStatus",
]
