"""The arms `rlm eval` compares, all driven through the `LMClient` protocol and the `RLM` class.

- ``direct``: the whole context and the question in one prompt to the root model. A context-limit error
  (or a prompt over ``context_window`` tokens, when given) scores 0 and is marked ``context_limit``.
- ``compaction``: the context is read in parts that fill the window up to a threshold; after each part the
  sub-model rewrites running notes; the root model answers from the notes.
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
from rlm_adapters.errors import ModelError, RLMError
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
        sub: The sub-model (`llm_query`, compaction notes); None means the root model.
        environment: The RLM sandbox kind.
        context_window: The root model's window in tokens, when known: ``direct`` skips prompts over it and
            ``compaction`` fills parts up to 80% of it.
        compaction_tokens: The compaction threshold when no window is given.
        rlm_kwargs: Extra `RLM` settings (``max_iterations``, ``timeout``, ``max_cost``, ...).
        prices: Prices for the non-RLM arms (the RLM arms use the engine's own table).
        owned: Clients this setup built and must close.
    """

    root: LMClient
    sub: LMClient | None = None
    environment: str = "subprocess"
    context_window: int | None = None
    compaction_tokens: int = 32_000
    rlm_kwargs: dict[str, Any] = field(default_factory=dict)
    prices: PriceTable = field(default_factory=PriceTable)
    owned: list[LMClient] = field(default_factory=list)

    @classmethod
    def from_options(cls, options: dict[str, Any], **settings: Any) -> ModelSetup:
        """Build the clients once from `rlm_adapters.settings.model_options` output."""
        root = make_client(options["backend"], options.get("backend_kwargs"))
        owned = [root] if owns_client(options["backend"]) else []
        sub = None
        for backend, kwargs in zip(
            options.get("other_backends", []), options.get("other_backend_kwargs", []), strict=True
        ):
            sub = make_client(backend, kwargs)
            if owns_client(backend):
                owned.append(sub)
        return cls(root=root, sub=sub, owned=owned, **settings)

    @property
    def threshold(self) -> int:
        """Tokens a compaction step may fill."""
        return int(self.context_window * 0.8) if self.context_window else self.compaction_tokens

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
        messages: list[Message] = [{"role": "user", "content": prompt}]
        reply: LMResponse = await client.acomplete(messages)
        out = self.outcome
        out.calls += 1
        out.input_tokens += reply.input_tokens
        out.output_tokens += reply.output_tokens
        out.cost += self.setup.prices.cost(reply.model, reply.input_tokens, reply.output_tokens)
        return reply.text


async def run_direct(setup: ModelSetup, instance: Instance) -> ArmOutcome:
    """The whole context in one prompt."""
    meter = _Meter(setup)
    prompt = f"{instance.context}\n\n{instance.question}"
    if setup.context_window is not None and count_tokens(prompt) > setup.context_window:
        meter.outcome.status = "context_limit"
        meter.outcome.error = f"the prompt exceeds the context window of {setup.context_window} tokens"
        return meter.outcome
    try:
        meter.outcome.answer = await meter.call(setup.root, prompt)
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


async def run_compaction(setup: ModelSetup, instance: Instance) -> ArmOutcome:
    """Read the context in parts, keeping notes with the sub-model; answer from the notes."""
    meter = _Meter(setup)
    tokens = count_tokens(instance.context)
    try:
        if tokens + count_tokens(instance.question) <= setup.threshold:
            meter.outcome.answer = await meter.call(setup.root, f"{instance.context}\n\n{instance.question}")
            return meter.outcome
        # A quarter of the threshold is left for the notes and the instructions.
        parts = split_parts(instance.context, tokens, max(256, setup.threshold * 3 // 4))
        notes = "(none yet)"
        for number, chunk in enumerate(parts, 1):
            prompt = NOTES_PROMPT.format(
                question=instance.question, notes=notes, part=number, parts=len(parts), chunk=chunk
            )
            notes = await meter.call(setup.sub or setup.root, prompt)
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
