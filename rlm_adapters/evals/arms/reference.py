"""The ``rlms`` arm of `rlm eval`: the reference RLM (PyPI ``rlms``, import ``rlm``) on the same instances.

It answers with the reference engine but the very same model clients as the ``rlm`` arm: each of our
`LMClient` objects is wrapped as the reference's ``BaseLM`` and handed to it, so the two engines differ only
in the engine (same model, same endpoint, same sampling settings), and get the same budget (iterations,
wall time, money). The reference runs its own loop in a worker thread; its model calls come back to the
eval's event loop, where our clients live. The reference's default in-process ``local`` REPL is used: it
executes model code in this process, as the reference does for its own users.

That REPL changes process-wide state for each cell (the working folder and ``sys.stdout``), so two reference
runs at once leave the process in a deleted folder: reference runs go one at a time, whatever
``--concurrency`` says, and each is timed from its own start. While an ``rlms`` run is in flight the
reference's ``rlm.core.rlm.get_client`` is routed to our clients; the last run to finish restores it, and
`restore_reference` undoes whatever an interrupted process left.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from rlm_adapters.core.lm import LMClient, Message
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.arms.base import ArmOutcome, ModelSetup, Status
from rlm_adapters.evals.tasks.base import Instance

_ids = itertools.count(1)
_registry: dict[str, Any] = {}
# Held by the thread running a reference completion (see the module's docstring).
_one_at_a_time = threading.Lock()


def available() -> bool:
    """True when the reference RLM is installed."""
    return importlib.util.find_spec("rlm") is not None and importlib.util.find_spec("rlm.core.rlm") is not None


def require_reference() -> None:
    """Raise `ConfigurationError` naming the package when the reference is not installed."""
    if not available():
        raise ConfigurationError(
            'the rlms arm needs the reference RLM: pip install "rlm-adapters[bench]" (or pip install rlms)'
        )


def _bridge_class() -> type:
    from rlm.clients.base_lm import BaseLM  # type: ignore[import-untyped]
    from rlm.core.types import ModelUsageSummary, UsageSummary  # type: ignore[import-untyped]

    class Bridge(BaseLM):  # type: ignore[misc]
        """One of our clients as the reference's ``BaseLM``: sync calls run on the eval's event loop."""

        def __init__(self, client: LMClient, loop: asyncio.AbstractEventLoop, key: str) -> None:
            super().__init__(model_name=key)
            self.client = client
            self.loop = loop
            self.calls = self.input_tokens = self.output_tokens = 0
            self.last = ModelUsageSummary(total_calls=0, total_input_tokens=0, total_output_tokens=0)
            self.lock = threading.Lock()

        def completion(self, prompt: Any, model: str | None = None) -> str:
            future = asyncio.run_coroutine_threadsafe(self._call(prompt), self.loop)
            return future.result()

        async def acompletion(self, prompt: Any, model: str | None = None) -> str:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._call(prompt), self.loop))

        async def _call(self, prompt: Any) -> str:
            if isinstance(prompt, str):
                messages: list[Message] = [{"role": "user", "content": prompt}]
            else:
                messages = [cast(Message, {"role": m["role"], "content": str(m["content"])}) for m in prompt]
            reply = await self.client.acomplete(messages)
            with self.lock:
                self.calls += 1
                self.input_tokens += reply.input_tokens
                self.output_tokens += reply.output_tokens
                self.last = ModelUsageSummary(
                    total_calls=1, total_input_tokens=reply.input_tokens, total_output_tokens=reply.output_tokens
                )
            return reply.text

        def get_usage_summary(self) -> Any:
            with self.lock:
                usage = ModelUsageSummary(
                    total_calls=self.calls,
                    total_input_tokens=self.input_tokens,
                    total_output_tokens=self.output_tokens,
                )
            return UsageSummary(model_usage_summaries={self.client.model_name: usage})

        def get_last_usage(self) -> Any:
            return self.last

    return Bridge


class _Route:
    """The reference's ``get_client`` routed to our bridges while at least one ``rlms`` run is in flight.

    The reference looks its clients up by backend name in its own module (``rlm.core.rlm.get_client``), the
    one seam it offers. Runs may overlap (``--concurrency``), so the first run in patches it, the last one out
    restores the original; each run's clients are registered under fresh names, so no run sees another's.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs = 0
        self.original: Callable[..., Any] | None = None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        with self.lock:
            if self.runs == 0:
                self._patch()
            self.runs += 1
        try:
            yield
        finally:
            with self.lock:
                self.runs = max(0, self.runs - 1)  # `restore_reference` may have reset the count meanwhile
                if self.runs == 0:
                    self.restore()

    def _patch(self) -> None:
        import rlm.core.rlm as reference  # type: ignore[import-untyped]

        original: Callable[..., Any] = reference.get_client

        def get_client(backend: Any, backend_kwargs: dict[str, Any] | None) -> Any:
            name = (backend_kwargs or {}).get("model_name")
            if backend == "rlm-adapters" and name in _registry:
                return _registry[name]
            return original(backend, backend_kwargs)

        self.original = original
        reference.get_client = get_client

    def restore(self) -> None:
        """Put the original ``get_client`` back, if this module replaced it (the caller holds the lock)."""
        if self.original is None:
            return
        import rlm.core.rlm as reference

        reference.get_client = self.original
        self.original = None


_route = _Route()


def restore_reference() -> None:
    """Undo what ``rlms`` runs left in the reference library: its ``get_client`` and our registered clients.

    A run restores ``rlm.core.rlm.get_client`` when it ends; this undoes a patch that an interrupted process
    (or a test) left behind. It must not be called while an ``rlms`` run is in flight.
    """
    with _route.lock:
        _route.restore()
        _route.runs = 0
        _registry.clear()


def _register(client: LMClient, loop: asyncio.AbstractEventLoop) -> str:
    key = f"rlm-adapters-{next(_ids)}:{client.model_name}"
    _registry[key] = _bridge_class()(client, loop, key)
    return key


def _run_reference(
    options: dict[str, Any], context: Any, question: str, cancelled: threading.Event, seconds: list[float]
) -> Any:
    """One reference completion in this worker thread, after any other one in the process has ended."""
    from rlm import RLM as ReferenceRLM

    with _one_at_a_time:
        if cancelled.is_set():  # its run was cancelled while it waited: start nothing, spend nothing
            raise RuntimeError("the run was cancelled before the reference started")
        started = time.perf_counter()
        try:
            return ReferenceRLM(**options).completion(context, root_prompt=question)
        finally:
            seconds.append(time.perf_counter() - started)


async def run_rlms(setup: ModelSetup, instance: Instance, depth: int = 1) -> ArmOutcome:
    """The reference RLM over `instance`, with `setup`'s clients and budget, timed from its own start."""
    require_reference()
    with _route.active():
        return await _run(setup, instance, depth)


async def _run(setup: ModelSetup, instance: Instance, depth: int) -> ArmOutcome:
    loop = asyncio.get_running_loop()
    root_key = _register(setup.root, loop)
    keys = [root_key]
    options: dict[str, Any] = {
        "backend": "rlm-adapters",
        "backend_kwargs": {"model_name": root_key},
        "environment": "local",
        "max_depth": depth,
    }
    if setup.sub is not None:
        sub_key = _register(setup.sub, loop)
        keys.append(sub_key)
        options["other_backends"] = ["rlm-adapters"]
        options["other_backend_kwargs"] = [{"model_name": sub_key}]
    budget = setup.rlm_kwargs
    for ours, theirs in (("max_iterations", "max_iterations"), ("timeout", "max_timeout"), ("max_cost", "max_budget")):
        if budget.get(ours) is not None:
            options[theirs] = budget[ours]
    bridges = [_registry[k] for k in keys]
    cancelled = threading.Event()
    seconds: list[float] = []
    try:
        completion = await asyncio.to_thread(
            _run_reference, options, instance.context, instance.question, cancelled, seconds
        )
        outcome = ArmOutcome(answer=str(completion.response), status="ok")
    except Exception as exc:  # the reference raises its limit errors; every failure is this arm's result
        kind = type(exc).__name__
        statuses: dict[str, Status] = {"TimeoutExceededError": "timeout", "BudgetExceededError": "budget"}
        partial = str(getattr(exc, "partial_answer", "") or "")
        outcome = ArmOutcome(answer=partial, status=statuses.get(kind, "error"), error=f"{kind}: {exc}")
    finally:
        cancelled.set()
        for key in keys:
            _registry.pop(key, None)
    outcome.calls = sum(b.calls for b in bridges)
    outcome.input_tokens = sum(b.input_tokens for b in bridges)
    outcome.output_tokens = sum(b.output_tokens for b in bridges)
    outcome.cost = sum(setup.prices.cost(b.client.model_name, b.input_tokens, b.output_tokens) for b in bridges)
    outcome.seconds = sum(seconds)
    outcome.extra["engine"] = "rlms"
    return outcome
