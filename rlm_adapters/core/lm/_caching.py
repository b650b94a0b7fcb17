"""Where the Anthropic clients (direct and on Bedrock) put prompt-cache breakpoints.

An RLM's root conversation grows by one reply and one feedback message a turn, and every turn re-sends it
all. Anthropic caches a prompt's prefix up to a marked block (a *breakpoint*, at most 4 a request) and bills
a later read of it at 0.1x the input price (a write at 1.25x, kept 5 minutes). So each root call marks:

- the system prompt (the same in every call of the run);
- the last message: the whole prefix is written, for the next turn to read;
- the message that was last in the previous call (two back: the reply and the new feedback came after it),
  so that the prefix written then is read now, explicitly rather than by the provider's look-back.

Three breakpoints, within the limit of four. A one-message call (a plain `llm_query`) has no later turn to
re-read it and gets none: a write costs more than plain input.
"""

from __future__ import annotations

MAX_BREAKPOINTS = 4
# Anthropic's marker of a breakpoint (the 5-minute cache).
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}


def breakpoints(turns: int, has_system: bool) -> list[int]:
    """The indices of the turns (not counting the system prompt) to mark, in order.

    Args:
        turns: How many non-system messages the request holds.
        has_system: Whether it has a system prompt (marked separately).
    """
    if turns == 0 or (turns == 1 and not has_system):
        return []
    marks = sorted({turns - 1, *([turns - 3] if turns >= 3 else [])})
    return marks[: MAX_BREAKPOINTS - int(has_system)]
