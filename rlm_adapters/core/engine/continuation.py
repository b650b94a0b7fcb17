"""The input of a persistent run that continues what its session's REPL already holds.

An agent sends its whole conversation at every step; a persistent session's REPL already has the earlier
steps as ``context_0``, ``context_1``, ... . A `Continuation` carries both forms, and the run picks one
under the session's lock, where nothing can close the sandbox in between: only the new part when the
REPL still holds every context the caller handed it, the whole input otherwise (a first run, a sandbox
closed by its idle or lifetime limit, a worker restarted mid-run, a run that failed before it could
report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlm_adapters.core.engine.session import Session


@dataclass(frozen=True)
class Continuation:
    """A context given in two forms, for ``RLM(persistent=True)``: `new` when the session's REPL holds
    `known` contexts (those the caller has handed it), else `full`.

    Attributes:
        full: The whole input.
        new: Only the part the session's REPL has not been given yet.
        known: How many contexts the caller believes the REPL holds (``result.metadata["session"]
            ["contexts"]`` after its last run; 0 before the first).
        full_query: The question that goes with `full` (None: the run's own ``root_prompt``).
        new_query: The question that goes with `new` (None: the run's own ``root_prompt``).
    """

    full: Any
    new: Any
    known: int
    full_query: str | None = None
    new_query: str | None = None

    def resolve(self, session: Session | None, query: str | None) -> tuple[Any, str | None]:
        """The input and the question for a run of `session` (whose lock the caller holds)."""
        if session is not None and session.started and self.known > 0 and session.context_count == self.known:
            return self.new, self.new_query if self.new_query is not None else query
        return self.full, self.full_query if self.full_query is not None else query


def resolve_input(prompt: Any, query: str | None, session: Session | None) -> tuple[Any, str | None]:
    """The context and question a run works on: `prompt` and `query`, or a `Continuation`'s pick."""
    if isinstance(prompt, Continuation):
        return prompt.resolve(session, query)
    return prompt, query
