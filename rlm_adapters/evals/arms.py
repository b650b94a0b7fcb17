"""The arms `rlm eval` compares, all driven through the `LMClient` protocol and the `RLM` class.

- ``direct``: the whole context and the question in one call to the root model, laid out as the task's
  original lays it out (`Instance.direct_messages`). A context-limit error (or a prompt over
  ``context_window`` tokens, when known) scores 0 and is marked ``context_limit``.
- ``compaction`` (the paper's summary agent): when the context and question fit the window, one call;
  otherwise the context is read in parts that fill the window (less room for instructions and notes),
  the compaction model rewrites running notes after each part, and the root model answers from them.
- ``rlm`` (depth 1), ``rlm-depth0`` (no sub-calls) and ``rlm-depth2`` (nested RLMs).
- ``rlms``: the reference RLM (PyPI ``rlms``) with the same clients and budget, when installed
  (`rlm_adapters.evals.rlms_arm`).

Every arm of a run shares one `ModelSetup`: the same root and sub-model clients and settings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from rlm_adapters.core.lm.base import LMClient, LMResponse, Message
from rlm_adapters.core.lm.registry import make_client, owns_client
from rlm_adapters.core.pricing import PriceTable
from rlm_adapters.core.rlm import RLM
from rlm_adapters.errors import ConfigurationError, ModelError, RLMError
from rlm_adapters.evals.tasks.base import Instance
from rlm_adapters.evals.tokens import count_tokens

ArmName = Literal["direct", "compaction", "rlm", "rlm-depth0", "rlm-depth2", "rlms"]
ARM_NAMES: tuple[ArmName, ...] = ("direct", "compaction", "rlm", "rlm-depth0", "rlm-depth2", "rlms")
RLM_DEPTHS: dict[str, int] = {"rlm": 1, "rlm-depth0": 0, "rlm-depth2": 2}
Status = Literal["ok", "context_limit", "error", "max_iterations", "budget", "timeout", "cancelled"]
_LIMIT_PHRASES = (
    "context length",
    "context_length",
    "maximum context",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "token limit",
    "reduce the length",
)
NOTES_PROMPT = (
    "You are reading a long document in parts; afterwards you must answer a question about the whole of it.\n"
    "Question: {question}\n\nYour notes so far:\n{notes}\n\nNext part ({part} of {parts}):\n{chunk}\n\n"
    "Rewrite your notes so that they keep everything from the parts read so far that is needed to answer the "
    "question exactly (counts, names, ids, dates). Reply with the notes only."
)
ANSWER_PROMPT = "Notes taken while reading a long document:\n{notes}\n\n{question}"


@dataclass
class ArmOutcome:
    """What one arm produced for one instance."""

    answer: str
    status: Status
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    calls: int = 0
    seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelSetup:
    """The model configuration every arm uses.

    Attributes:
        root: The root model (answers in ``direct``; writes code in the RLM arms).
        sub: The sub-model (`llm_query` in the RLM arms); None means the root model.
        compactor: The model that writes compaction notes (``--compaction-model``; the paper used GPT-5-nano
            under GPT-5); None means the root model.
        environment: The RLM sandbox kind.
        context_window: The root model's window in tokens, when known: ``direct`` skips prompts over it and
            ``compaction`` fills it.
        compaction_tokens: An explicit compaction threshold in tokens, instead of the window.
        rlm_kwargs: Extra `RLM` settings (``max_iterations``, ``timeout``, ``max_cost``, ...).
        prices: Prices for the non-RLM arms (the RLM arms use the engine's own table).
        owned: Clients this setup built and must close.
    """

    root: LMClient
    sub: LMClient | None = None
    compactor: LMClient | None = None
    environment: str = "subprocess"
    context_window: int | None = None
    compaction_tokens: int | None = None
    rlm_kwargs: dict[str, Any] = field(default_factory=dict)
    prices: PriceTable = field(default_factory=PriceTable)
    owned: list[LMClient] = field(default_factory=list)

    @classmethod
    def from_options(
        cls, options: dict[str, Any], *, compaction_options: dict[str, Any] | None = None, **settings: Any
    ) -> ModelSetup:
        """Build the clients once from `rlm_adapters.model_flags.model_options` output.

        Args:
            options: The root (and sub-) model options.
            compaction_options: ``model_options`` output for ``--compaction-model``, when one is given.
            settings: The other `ModelSetup` fields.
        """
        root = make_client(options["backend"], options.get("backend_kwargs"))
        owned = [root] if owns_client(options["backend"]) else []
        sub = None
        for backend, kwargs in zip(
            options.get("other_backends", []), options.get("other_backend_kwargs", []), strict=True
        ):
            sub = make_client(backend, kwargs)
            if owns_client(backend):
                owned.append(sub)
        compactor = None
        if compaction_options is not None:
            compactor = make_client(compaction_options["backend"], compaction_options.get("backend_kwargs"))
            if owns_client(compaction_options["backend"]):
                owned.append(compactor)
        return cls(root=root, sub=sub, compactor=compactor, owned=owned, **settings)

    @property
    def threshold(self) -> int:
        """Tokens a compaction step may fill: the explicit threshold, else the model's window.

        Raises:
            ConfigurationError: when neither is known.
        """
        if self.compaction_tokens is not None:
            return self.compaction_tokens
        if self.context_window is not None:
            return self.context_window
        raise ConfigurationError(
            f"compaction fills the model's window, and the window of {self.root.model_name!r} is not known: "
            "pass --context-window"
        )

    def settings(self) -> dict[str, Any]:
        """Every model setting that can change a result, for result keys and reports."""
        return {
            "model": self.root.model_name,
            "sub_model": self.sub.model_name if self.sub else None,
            "compaction_model": (self.compactor or self.root).model_name,
            "context_window": self.context_window,
            "compaction_tokens": self.compaction_tokens,
            "environment": self.environment,
            "rlm": dict(sorted(self.rlm_kwargs.items())),
        }

    async def aclose(self) -> None:
        """Close the clients this setup built."""
        for client in self.owned:
            await client.aclose()


def is_context_limit(error: BaseException) -> bool:
    """True when a model error says the prompt did not fit the model's context window."""
    if isinstance(error, ModelError) and error.status_code == 413:
        return True
    message = str(error).lower()
    return any(phrase in message for phrase in _LIMIT_PHRASES)


class _Meter:
    """Adds up the calls of one non-RLM arm."""

    def __init__(self, setup: ModelSetup) -> None:
        self.setup = setup
        self.outcome = ArmOutcome(answer="", status="ok")

    async def call(self, client: LMClient, prompt: str) -> str:
        return await self.call_messages(client, [{"role": "user", "content": prompt}])

    async def call_messages(self, client: LMClient, messages: list[Message]) -> str:
        reply: LMResponse = await client.acomplete(messages)
        out = self.outcome
        out.calls += 1
        out.input_tokens += reply.input_tokens
        out.output_tokens += reply.output_tokens
        if reply.cost is not None:  # the provider's own figure (LiteLLM)
            out.cost += reply.cost
        else:
            out.cost += self.setup.prices.cost(reply.model, reply.input_tokens, reply.output_tokens)
        return reply.text


async def run_direct(setup: ModelSetup, instance: Instance) -> ArmOutcome:
    """The whole context in one call."""
    meter = _Meter(setup)
    messages = instance.direct_messages()
    if setup.context_window is not None:
        tokens = sum(count_tokens(message["content"]) for message in messages)
        if tokens > setup.context_window:
            meter.outcome.status = "context_limit"
            meter.outcome.error = f"the prompt ({tokens} tokens) exceeds the context window of {setup.context_window}"
            return meter.outcome
    try:
        meter.outcome.answer = await meter.call_messages(setup.root, messages)
    except ModelError as exc:
        meter.outcome.status = "context_limit" if is_context_limit(exc) else "error"
        meter.outcome.error = str(exc)
    return meter.outcome


def split_parts(text: str, tokens: int, part_tokens: int) -> list[str]:
    """Cut `text` (of `tokens` tokens) into parts of about `part_tokens`, at line ends where possible."""
    size = max(1, int(len(text) * part_tokens / max(tokens, 1)))
    parts, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        newline = text.rfind("\n", start + size // 2, end)
        if end < len(text) and newline > 0:
            end = newline + 1
        parts.append(text[start:end])
        start = end
    return parts


def part_tokens(threshold: int, question: str) -> int:
    """Tokens of context per compaction step: the threshold less the instructions, and an eighth for notes."""
    overhead = count_tokens(NOTES_PROMPT.format(question=question, notes="", part=0, parts=0, chunk=""))
    return max(256, threshold - overhead - threshold // 8)


async def run_compaction(setup: ModelSetup, instance: Instance) -> ArmOutcome:
    """Read the context in window-filling parts, keeping notes with the compaction model; answer from them."""
    meter = _Meter(setup)
    tokens = count_tokens(instance.context)
    threshold = setup.threshold
    try:
        if tokens + count_tokens(instance.question) <= threshold:
            # It all fits: the agent has nothing to summarise and sees what `direct` sees.
            meter.outcome.answer = await meter.call_messages(setup.root, instance.direct_messages())
            return meter.outcome
        parts = split_parts(instance.context, tokens, part_tokens(threshold, instance.question))
        notes = "(none yet)"
        for number, chunk in enumerate(parts, 1):
            prompt = NOTES_PROMPT.format(
                question=instance.question, notes=notes, part=number, parts=len(parts), chunk=chunk
            )
            notes = await meter.call(setup.compactor or setup.root, prompt)
        meter.outcome.extra["parts"] = len(parts)
        meter.outcome.answer = await meter.call(
            setup.root, ANSWER_PROMPT.format(notes=notes, question=instance.question)
        )
    except ModelError as exc:
        meter.outcome.status = "context_limit" if is_context_limit(exc) else "error"
        meter.outcome.error = str(exc)
    return meter.outcome


async def run_rlm(setup: ModelSetup, instance: Instance, depth: int) -> ArmOutcome:
    """An RLM of `depth` over the context, built from the shared clients."""
    rlm = RLM(
        backend=setup.root,
        other_backends=[setup.sub] if setup.sub else [],
        environment=setup.environment,
        max_depth=depth,
        **setup.rlm_kwargs,
    )
    try:
        result = await rlm.acompletion(instance.context, instance.question)
    except RLMError as exc:
        return ArmOutcome(answer="", status="error", error=str(exc))
    total = result.usage_summary.total
    status: Status = "ok" if result.finish_reason == "final" else result.finish_reason
    return ArmOutcome(
        answer=result.response,
        status=status,
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cost=result.cost,
        calls=total.calls,
        error=result.error,
        extra={
            "iterations": result.iterations,
            "sub_calls": result.metadata.get("sub_calls", 0),
            "depth_reached": result.metadata.get("depth_reached", 0),
        },
    )


async def run_arm(arm: ArmName, setup: ModelSetup, instance: Instance) -> ArmOutcome:
    """Run `arm` on `instance` and time it."""
    started = time.perf_counter()
    if arm == "direct":
        outcome = await run_direct(setup, instance)
    elif arm == "compaction":
        outcome = await run_compaction(setup, instance)
    elif arm == "rlms":
        from rlm_adapters.evals.rlms_arm import run_rlms

        outcome = await run_rlms(setup, instance)
    else:
        outcome = await run_rlm(setup, instance, RLM_DEPTHS[arm])
    outcome.seconds = time.perf_counter() - started
    return outcome


def parse_arms(text: str) -> list[ArmName]:
    """Parse ``direct,rlm`` into arm names.

    Raises:
        ValueError: naming an unknown arm and the known ones.
    """
    arms: list[ArmName] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = next((name for name in ARM_NAMES if name == part), None)
        if match is None:
            raise ValueError(f"unknown arm {part!r}; use one of {', '.join(ARM_NAMES)}")
        if match == "rlms":
            from rlm_adapters.evals.rlms_arm import require

            require()
        if match not in arms:
            arms.append(match)
    if not arms:
        raise ValueError("no arm given; use one or more of " + ", ".join(ARM_NAMES))
    return arms
