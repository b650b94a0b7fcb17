"""A scripted root model that replies by turn of its own conversation."""

from __future__ import annotations

from rlm_adapters.core.lm import ScriptedModel
from rlm_adapters.testing._policies import scripted_root


def by_turn(*replies: str, model_name: str = "scripted", latency: float = 0.0) -> ScriptedModel:
    """A `ScriptedModel` whose reply depends only on the turn of the conversation it is sent.

    The first reply answers a conversation with no assistant message yet, the second one with one, and so
    on; the last reply repeats. ``ScriptedModel([...])`` plays its list in call order across every
    conversation instead, so it cannot serve as the root of nested runs, of several runs at once, or of a run
    replayed from the call cache; this can. For a reply that depends on more than the turn, give
    `ScriptedModel` a function of the messages and count the turn with `turn_of`.

    Example::

        root = by_turn("```repl\\nprint(len(context))\\n```", "FINAL(done)")
        RLM(backend=root, environment="local").completion("some context", "how long is it?")

    Args:
        replies: The root model's replies, by turn.
        model_name: The name the calls are accounted under.
        latency: Seconds to wait before each reply.

    Raises:
        ValueError: No reply was given.
    """
    if not replies:
        raise ValueError("by_turn needs at least one reply, e.g. by_turn('FINAL(done)')")
    return ScriptedModel(scripted_root(replies), model_name=model_name, latency=latency)
