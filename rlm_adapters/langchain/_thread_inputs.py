"""What each thread's persistent REPL has been given, so that an agent's next step hands it only what is new.

An agent sends the whole conversation at every step. With ``persistent_threads=True`` the thread's REPL
already holds the earlier steps as ``context_0``, ``context_1``, ... , so a step's context is only the
messages it has not seen (the previous answer with its tool calls, the tool results, a new question): a
multi-megabyte history is written into the sandbox once, not once per step. The engine makes the final
pick (`rlm_adapters.core.engine.continuation.Continuation`), under the session's lock: a REPL that lost the
earlier contexts (closed when idle, restarted) gets the whole conversation again.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage

from rlm_adapters.core import RLM, Continuation, RLMResult
from rlm_adapters.langchain._messages import continued_context, conversation_to_context, message_entry


def message_key(message: BaseMessage) -> str:
    """Identifies a message across an agent's steps: its id when it has one (LangGraph gives every message
    of its state one), else a digest of its role, text and tool fields."""
    if message.id:
        return f"{message.type}:{message.id}"
    entry = json.dumps(message_entry(message), ensure_ascii=False, sort_keys=True)
    return f"{message.type}#{hashlib.sha256(entry.encode('utf-8', 'surrogatepass')).hexdigest()}"


@dataclass(frozen=True)
class _Given:
    """What one thread's REPL holds: the messages handed over (counted, as a message may repeat) and how
    many contexts its session reported after that run."""

    keys: Counter[str]
    contexts: int

    def unseen(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        used: Counter[str] = Counter()
        new = []
        for message in messages:
            key = message_key(message)
            if used[key] < self.keys[key]:
                used[key] += 1
            else:
                new.append(message)
        return new


@dataclass(frozen=True)
class StepInput:
    """One call's input for the engine.

    Attributes:
        prompt: The context, or a `Continuation` of it for a thread's persistent REPL.
        query: The root model's question (for the whole conversation).
        instructions: The system messages' text.
        remember: Call with the run's result, to note what the thread's REPL now holds.
    """

    prompt: Any
    query: str
    instructions: str | None
    remember: Callable[[RLMResult], None]


class ThreadInputs:
    """The messages each persistent engine (one per thread) has been given; an engine dropped by its owner
    takes its record with it."""

    def __init__(self) -> None:
        self._given: weakref.WeakKeyDictionary[RLM, _Given] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def step(self, rlm: RLM, messages: Sequence[BaseMessage]) -> StepInput:
        """The input of a call on `rlm`: the whole conversation, or a `Continuation` when `rlm` is a thread's
        persistent engine that has been given part of it before."""
        context, query, instructions = conversation_to_context(messages)
        if not rlm.persistent:
            return StepInput(context, query, instructions, lambda _result: None)
        with self._lock:
            given = self._given.get(rlm)
        conversation = [m for m in messages if not isinstance(m, SystemMessage)]

        def remember(result: RLMResult) -> None:
            contexts = (result.metadata.get("session") or {}).get("contexts", 0)
            record = _Given(Counter(message_key(m) for m in conversation), int(contexts))
            with self._lock:
                self._given[rlm] = record

        new = given.unseen(conversation) if given is not None else []
        if given is None or given.contexts == 0 or not new:
            return StepInput(context, query, instructions, remember)
        new_context, new_query = continued_context(messages, new)
        return StepInput(
            Continuation(context, new_context, given.contexts, new_query=new_query), query, instructions, remember
        )
