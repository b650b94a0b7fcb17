"""Rebuilding a persistent session from its turns: the engine part of sessions that survive a crash.

A persistent session's REPL holds what its runs left there (variables, ``context_N``, ``history_N``). That
state dies with the process, but it is a function of the runs that made it: their contexts, questions and
instructions, and the model's replies. So a session records each turn whose sandbox it kept
(`Session.turns`, reset with the sandbox), and `replay` runs those turns again, in order, in a new
persistent RLM: with the same call cache every model call of them replays from it, the cells run again in
the fresh sandbox, and the REPL ends as it was, for nothing. What keeps the turns between processes (a file
next to the cache, say) is the caller's; `SessionTurn.to_dict` gives them as JSON when their contexts are.
A turn's `final_validator` and per-run callbacks are not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rlm_adapters.core.result import RLMResult
from rlm_adapters.errors import ConfigurationError


class Replayable(Protocol):
    """What `replay` needs of an `RLM` (named by shape: the RLM and the session import this module)."""

    @property
    def persistent(self) -> bool:
        """Whether the RLM keeps one session."""

    @property
    def session(self) -> Any:
        """Its `Session`, or None before the first run."""

    async def acompletion(
        self, prompt: Any, root_prompt: str | None = None, *, instructions: str | None = None
    ) -> RLMResult:
        """One run."""


@dataclass(frozen=True)
class SessionTurn:
    """One run of a persistent session, as it must be run again to rebuild the session.

    Attributes:
        prompt: The context, as given to `completion`.
        query: The question.
        instructions: The run's extra instructions.
    """

    prompt: Any
    query: str | None = None
    instructions: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"prompt", "query", "instructions"}`` (JSON when the prompt is)."""
        return {"prompt": self.prompt, "query": self.query, "instructions": self.instructions}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SessionTurn:
        """A turn from `to_dict`'s output.

        Raises:
            ConfigurationError: naming what is missing or of the wrong type.
        """
        if not isinstance(data, Mapping) or "prompt" not in data:
            raise ConfigurationError(f"a session turn must be a dict with a 'prompt', got {data!r:.200}")
        extra = set(data) - {"prompt", "query", "instructions"}
        if extra:
            raise ConfigurationError(
                f"a session turn has unknown keys {sorted(extra)}; it takes prompt, query, instructions"
            )
        for key in ("query", "instructions"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ConfigurationError(f"a session turn's {key} must be a string or None, got {data[key]!r:.200}")
        return cls(data["prompt"], data.get("query"), data.get("instructions"))


async def replay(rlm: Replayable, turns: Sequence[SessionTurn]) -> list[RLMResult]:
    """Run `turns` in order in `rlm`'s session (a fresh one), returning their results.

    Raises:
        ConfigurationError: when `rlm` is not persistent, or its session has run already.
    """
    if not rlm.persistent:
        raise ConfigurationError("replaying a session needs RLM(persistent=True), whose session it rebuilds")
    session = rlm.session
    if session is not None and not session.closed and session.turns:
        raise ConfigurationError("this RLM's session has turns already: replay into a new persistent RLM")
    results = []
    for turn in turns:
        results.append(await rlm.acompletion(turn.prompt, turn.query, instructions=turn.instructions))
    return results
