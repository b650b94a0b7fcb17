"""State shared by a run and every nested RLM in it: budget, events, model clients, concurrency limits."""

from __future__ import annotations

import asyncio
import inspect
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rlm_adapters.core.budget import Budget
from rlm_adapters.core.events import EventBus
from rlm_adapters.core.lm.base import LMClient
from rlm_adapters.core.lm.limiter import AdaptiveLimiter
from rlm_adapters.core.sandbox.base import CallError

T = TypeVar("T")


def endpoint_of(client: LMClient) -> str:
    """The key calls to `client` are limited under: its endpoint URL if it has one, else its model."""
    endpoint = getattr(client, "endpoint", None)
    return endpoint if isinstance(endpoint, str) and endpoint else f"model:{client.model_name}"


@dataclass(frozen=True)
class ToolSpec:
    """A host-side function exposed in the REPL."""

    fn: Callable[..., Any]
    description: str

    async def call(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run the function (sync ones in a thread, so the event loop stays free)."""
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(*args, **kwargs)
        outcome = await asyncio.to_thread(self.fn, *args, **kwargs)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome


@dataclass(frozen=True)
class LoopSettings:
    """The per-level settings of the loop."""

    max_depth: int
    max_iterations: int
    max_output_chars: int
    environment: str
    environment_kwargs: dict[str, Any]
    instructions: str | None = None


@dataclass
class RunTree:
    """Everything the runs of one `acompletion` call share."""

    settings: LoopSettings
    budget: Budget
    bus: EventBus
    root_client: LMClient
    sub_clients: dict[str, LMClient]
    max_concurrency: int
    tools: dict[str, ToolSpec] = field(default_factory=dict)
    sub_tools: dict[str, ToolSpec] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    _limiters: dict[str, AdaptiveLimiter] = field(default_factory=dict)
    _workdir: Path | None = None
    max_depth_reached: int = 0
    owned_clients: list[LMClient] = field(default_factory=list)

    @property
    def default_sub_client(self) -> LMClient:
        """The model of `llm_query` without `model=` (the first other backend, else the root model)."""
        return next(iter(self.sub_clients.values()), self.root_client)

    def sub_client(self, model: str | None) -> LMClient:
        """The client for ``llm_query(..., model=model)``."""
        if model is None:
            return self.default_sub_client
        if model in self.sub_clients:
            return self.sub_clients[model]
        if model == self.root_client.model_name:
            return self.root_client
        known = [*self.sub_clients, self.root_client.model_name]
        raise CallError(f"unknown model {model!r} in a sub-call; available: {known}")

    def limiter(self, client: LMClient) -> AdaptiveLimiter:
        """The adaptive bound on calls in flight to the client's endpoint (its model when it names none)."""
        key = endpoint_of(client)
        if key not in self._limiters:
            self._limiters[key] = AdaptiveLimiter(self.max_concurrency, endpoint=key)
        return self._limiters[key]

    def tools_for(self, depth: int) -> dict[str, ToolSpec]:
        """Custom tools at the top level, custom sub-tools in nested RLMs."""
        return self.tools if depth == 0 else self.sub_tools

    def scratch(self, run_id: str) -> Path:
        """A fresh folder for one run level's context file and scratch files."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="rlm-"))
        folder = self._workdir / run_id[:12]
        folder.mkdir(parents=True, exist_ok=True)
        return folder

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

    def cleanup(self) -> None:
        """Remove the run's temporary files."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
