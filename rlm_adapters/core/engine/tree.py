"""State shared by a run and every nested RLM in it: budget, events, model clients, concurrency limits."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rlm_adapters.core.cache import RunCalls
from rlm_adapters.core.engine.budget import Budget
from rlm_adapters.core.engine.tools import ToolSet, ToolSpec
from rlm_adapters.core.events import EventBus
from rlm_adapters.core.lm import AdaptiveLimiter, ModelClient
from rlm_adapters.core.pricing import note_unpriced
from rlm_adapters.core.sandbox import REAPER, CallError, new_folder
from rlm_adapters.core.settings import RLMSettings

T = TypeVar("T")


def endpoint_of(client: ModelClient) -> str:
    """The key calls to `client` are limited under: its endpoint URL if it has one, else its model."""
    return client.endpoint or f"model:{client.model_name}"


@dataclass
class RunTree:
    """Everything the runs of one `acompletion` call share."""

    settings: RLMSettings
    budget: Budget
    bus: EventBus
    root_client: ModelClient
    sub_clients: dict[str, ModelClient]
    tools: ToolSet = field(default_factory=ToolSet)
    sub_tools: ToolSet = field(default_factory=ToolSet)
    owned_clients: list[ModelClient] = field(default_factory=list)
    calls: RunCalls | None = None  # the call cache as this run sees it (None: no cache)
    max_depth_reached: int = 0
    _limiters: dict[str, AdaptiveLimiter] = field(default_factory=dict)
    _nested_semaphore: asyncio.Semaphore | None = None
    _sandbox_slots: dict[int, asyncio.Semaphore] = field(default_factory=dict)
    _workdir: Path | None = None

    def __post_init__(self) -> None:
        if self.budget.limits.max_cost is not None:
            # Said before the first call, not after it: a cost cap cannot see an unpriced model's spend.
            for client in (self.root_client, *self.sub_clients.values()):
                if self.budget.prices.price(client.model_name) is None:
                    note_unpriced(client.model_name, capped=True)

    @property
    def default_sub_client(self) -> ModelClient:
        """The model of `llm_query` without `model=` (the first other backend, else the root model)."""
        return next(iter(self.sub_clients.values()), self.root_client)

    def sub_client(self, model: str | None) -> ModelClient:
        """The client for ``llm_query(..., model=model)``."""
        if model is None:
            return self.default_sub_client
        if model in self.sub_clients:
            return self.sub_clients[model]
        if model == self.root_client.model_name:
            return self.root_client
        known = self.model_names()
        raise CallError(f"unknown model {model!r} in a sub-call; available: {known}")

    def model_names(self) -> list[str]:
        """Every model a sub-call may name."""
        return [*self.sub_clients, self.root_client.model_name]

    def nested_client(self, model: str | None) -> ModelClient:
        """The root model of a nested RLM: the run's root model unless `model` names another."""
        return self.root_client if model is None else self.sub_client(model)

    def nested_slots(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Bounds the nested RLMs running at once (`max_concurrent_subcalls`; None: no bound)."""
        limit = self.settings.max_concurrent_subcalls
        if limit is None:
            return contextlib.nullcontext()
        if self._nested_semaphore is None:
            self._nested_semaphore = asyncio.Semaphore(limit)
        return self._nested_semaphore

    def limiter(self, client: ModelClient) -> AdaptiveLimiter:
        """The adaptive bound on calls in flight to the client's endpoint (its model when it names none)."""
        key = endpoint_of(client)
        if key not in self._limiters:
            self._limiters[key] = AdaptiveLimiter(self.settings.max_concurrency, endpoint=key)
        return self._limiters[key]

    @contextlib.asynccontextmanager
    async def sandbox_slot(self, depth: int) -> AsyncIterator[None]:
        """Hold one of the sandboxes a nested run at `depth` may run; wait while all are taken.

        The top-level run holds one sandbox; the rest of `max_sandboxes` is shared out among the
        nesting depths (at least one each). A run waits only for slots of a deeper level than its own,
        and the deepest level never waits for anything, so waiting cannot deadlock.
        """
        if depth not in self._sandbox_slots:
            levels = max(1, self.settings.max_depth - 1)
            self._sandbox_slots[depth] = asyncio.Semaphore(max(1, (self.settings.max_sandboxes - 1) // levels))
        async with self._sandbox_slots[depth]:
            yield

    def tools_for(self, depth: int) -> dict[str, ToolSpec]:
        """Custom tools at the top level, custom sub-tools in nested RLMs."""
        return (self.tools if depth == 0 else self.sub_tools).functions

    def values_for(self, depth: int) -> tuple[dict[str, Any], dict[str, str]]:
        """Plain values given as tools at this depth, and their descriptions for the prompt."""
        tools = self.tools if depth == 0 else self.sub_tools
        return tools.values, tools.notes

    def scratch(self, run_id: str) -> Path:
        """A fresh folder for one run level's context file and scratch files."""
        if self._workdir is None:
            self._workdir = new_folder("run")  # named after this process: swept if it is killed
        folder = self._workdir / run_id[:12]
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def deadline(self) -> float | None:
        """When the run must end, as a `time.monotonic()` instant (None without a timeout); model calls
        carry it to their clients (`core/lm/deadline.py`)."""
        remaining = self.budget.remaining_time()
        return None if remaining is None else time.monotonic() + remaining

    async def within_deadline(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, bounded by the run's remaining wall time."""
        remaining = self.budget.remaining_time()
        if remaining is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, remaining)
        except TimeoutError:
            self.budget.expire_time()
            raise

    async def aclose(self) -> None:
        """Close the clients the engine built; remove the run's files in the background (`REAPER.flush`
        waits for them)."""
        await asyncio.gather(*(client.aclose() for client in self.owned_clients), return_exceptions=True)
        if self._workdir is not None:
            REAPER.submit(functools.partial(shutil.rmtree, self._workdir, ignore_errors=True))
            self._workdir = None
