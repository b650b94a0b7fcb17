"""The ``rlms`` arm of `rlm eval`: the reference RLM (PyPI ``rlms``, import ``rlm``) on the same instances.

It answers with the reference engine but the very same model clients as the ``rlm`` arm: each of our
`LMClient` objects is wrapped as the reference's ``BaseLM`` and handed to it, so the two engines differ only
in the engine (same model, same endpoint, same sampling settings), and get the same budget (iterations,
wall time, money). The reference runs its own loop in a worker thread; its model calls come back to the
eval's event loop, where our clients live. The reference's default in-process ``local`` REPL is used: it
executes model code in this process, as the reference does for its own users.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import threading
import time
from typing import Any, cast

from rlm_adapters.core.lm.base import LMClient, Message
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.arms.base import ArmOutcome, ModelSetup, Status
from rlm_adapters.evals.tasks.base import Instance

_ids = itertools.count(1)
_registry: dict[str, Any] = {}
_patch_lock = threading.Lock()
_patched = False


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


def _install() -> None:
    """Route the reference's ``get_client`` to our bridges for the names this module hands out.

    Each run registers its clients under fresh names, so concurrent runs never see each other's clients.
    """
    global _patched
    with _patch_lock:
        if _patched:
            return
        import rlm.core.rlm as reference  # type: ignore[import-untyped]

        original = reference.get_client

        def get_client(backend: Any, backend_kwargs: dict[str, Any] | None) -> Any:
            name = (backend_kwargs or {}).get("model_name")
            if backend == "rlm-adapters" and name in _registry:
                return _registry[name]
            return original(backend, backend_kwargs)

        reference.get_client = get_client
        _patched = True


def _register(client: LMClient, loop: asyncio.AbstractEventLoop) -> str:
    key = f"rlm-adapters-{next(_ids)}:{client.model_name}"
    _registry[key] = _bridge_class()(client, loop, key)
    return key


def _run_reference(options: dict[str, Any], context: Any, question: str) -> Any:
    from rlm import RLM as ReferenceRLM

    return ReferenceRLM(**options).completion(context, root_prompt=question)


async def run_rlms(setup: ModelSetup, instance: Instance, depth: int = 1) -> ArmOutcome:
    """The reference RLM over `instance`, with `setup`'s clients and budget."""
    require_reference()
    _install()
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
    started = time.perf_counter()
    try:
        completion = await asyncio.to_thread(_run_reference, options, instance.context, instance.question)
        outcome = ArmOutcome(answer=str(completion.response), status="ok")
    except Exception as exc:  # the reference raises its limit errors; every failure is this arm's result
        kind = type(exc).__name__
        statuses: dict[str, Status] = {"TimeoutExceededError": "timeout", "BudgetExceededError": "budget"}
        partial = str(getattr(exc, "partial_answer", "") or "")
        outcome = ArmOutcome(answer=partial, status=statuses.get(kind, "error"), error=f"{kind}: {exc}")
    finally:
        for key in keys:
            _registry.pop(key, None)
    outcome.calls = sum(b.calls for b in bridges)
    outcome.input_tokens = sum(b.input_tokens for b in bridges)
    outcome.output_tokens = sum(b.output_tokens for b in bridges)
    outcome.cost = sum(setup.prices.cost(b.client.model_name, b.input_tokens, b.output_tokens) for b in bridges)
    outcome.seconds = time.perf_counter() - started
    outcome.extra["engine"] = "rlms"
    return outcome
