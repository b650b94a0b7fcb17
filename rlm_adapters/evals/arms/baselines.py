"""The paper's two baselines, through the `LMClient` protocol.

- ``direct`` (the paper's base model): the whole context and the question in one call to the root model, laid
  out as the task's original lays it out (`Instance.direct_messages`). A context-limit error (or a prompt over
  ``context_window`` tokens, when known) scores 0 and is marked ``context_limit``.
- ``compaction`` (the paper's summary agent): when the context and question fit the window, one call;
  otherwise the context is read in parts that fill the window (less room for instructions and notes),
  the compaction model rewrites running notes after each part, and the root model answers from them.
"""

from __future__ import annotations

from rlm_adapters.core.cache import RunCalls
from rlm_adapters.core.lm import LMResponse, Message, ModelClient
from rlm_adapters.errors import ModelError, is_context_limit
from rlm_adapters.evals.arms.base import ArmOutcome, ModelSetup
from rlm_adapters.evals.tasks.base import Instance
from rlm_adapters.evals.tokens import count_tokens

NOTES_PROMPT = (
    "You are reading a long document in parts; afterwards you must answer a question about the whole of it.\n"
    "Question: {question}\n\nYour notes so far:\n{notes}\n\nNext part ({part} of {parts}):\n{chunk}\n\n"
    "Rewrite your notes so that they keep everything from the parts read so far that is needed to answer the "
    "question exactly (counts, names, ids, dates). Reply with the notes only."
)
ANSWER_PROMPT = "Notes taken while reading a long document:\n{notes}\n\n{question}"


class _Meter:
    """Adds up the calls of one non-RLM arm on one instance, each looked up in its call cache scope first."""

    def __init__(self, setup: ModelSetup, arm: str, instance: Instance, repeat: int) -> None:
        self.setup = setup
        self.outcome = ArmOutcome(answer="", status="ok")
        cache = setup.cache_for(arm, instance, repeat)
        self.calls = RunCalls(cache) if cache is not None else None

    async def call(self, client: ModelClient, prompt: str) -> str:
        return await self.call_messages(client, [{"role": "user", "content": prompt}])

    async def call_messages(self, client: ModelClient, messages: list[Message]) -> str:
        ticket = self.calls.ticket(client, messages) if self.calls is not None else None
        stored = await ticket.lookup() if ticket is not None else None
        out = self.outcome
        if stored is not None:
            reply: LMResponse = stored.response()
            cost = stored.cost  # what it cost when it was paid: the record is the arm's cost, not this run's bill
            out.extra["cached_calls"] = out.extra.get("cached_calls", 0) + 1
        else:
            reply = await client.acomplete(messages)
            # The provider's own figure (LiteLLM), else the price table's.
            cost = (
                reply.cost
                if reply.cost is not None
                else self.setup.prices.cost(reply.model, reply.input_tokens, reply.output_tokens)
            )
            if ticket is not None:
                reply = await ticket.keep(reply, cost)
        out.calls += 1
        out.input_tokens += reply.input_tokens
        out.output_tokens += reply.output_tokens
        out.cost += cost
        return reply.text


async def run_direct(setup: ModelSetup, instance: Instance, repeat: int = 0) -> ArmOutcome:
    """The whole context in one call."""
    meter = _Meter(setup, "direct", instance, repeat)
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


async def run_compaction(setup: ModelSetup, instance: Instance, repeat: int = 0) -> ArmOutcome:
    """Read the context in window-filling parts, keeping notes with the compaction model; answer from them."""
    meter = _Meter(setup, "compaction", instance, repeat)
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
