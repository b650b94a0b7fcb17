"""What travels beside one model call: the run's reply cap, and what the call has produced so far.

Like the run's deadline (`deadline.py`), these are context variables set by the engine around each call
(`call_scope`), so that the `LMClient` protocol stays "messages in, reply out":

- `reply_cap` is the most tokens one reply may hold (the run's ``max_reply_tokens``). Each SDK client sends it
  in its provider's own field (OpenAI ``max_completion_tokens``, Anthropic ``max_tokens``, Gemini
  ``max_output_tokens``, Bedrock ``maxTokens``) unless its own ``backend_kwargs`` set one, which wins: it is
  the more specific choice, made for that model.
- `CallProgress` is filled in while the reply arrives by a client that streams it; when the call is cut (a
  timeout, a budget, a disconnect, a cancellation) the engine counts what it holds, since the provider bills
  that work too.

A client called outside a run sees no cap and no progress.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class CallProgress:
    """What one call in flight has produced so far.

    Attributes:
        output_tokens: Reply tokens received so far, one per streamed piece.
        input_tokens: The prompt tokens the provider reported, once it did (None: not yet).
        text: The reply's text received so far.
        streamed: The client streams its replies (so a cut call's output is counted, not unknown).
    """

    output_tokens: int = 0
    input_tokens: int | None = None
    text: str = ""
    streamed: bool = False

    def received(self, piece: str) -> None:
        """A piece of the reply arrived (one streamed delta, one token as OpenAI-compatible servers send them):
        count it. A server that packs several tokens in a delta is undercounted, never overcounted: the
        estimate from the text would overcount code's long whitespace tokens."""
        if piece:
            self.text += piece
            self.output_tokens += 1


_CAP: ContextVar[int | None] = ContextVar("rlm_reply_cap", default=None)
_PROGRESS: ContextVar[CallProgress | None] = ContextVar("rlm_call_progress", default=None)


@contextlib.contextmanager
def call_scope(cap: int | None, progress: CallProgress | None) -> Iterator[None]:
    """Make `cap` the reply cap and `progress` the progress record of the calls made inside."""
    cap_token = _CAP.set(cap)
    progress_token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(progress_token)
        _CAP.reset(cap_token)


def reply_cap() -> int | None:
    """The most tokens the reply of the call being made may hold (the run's ``max_reply_tokens``), or None."""
    return _CAP.get()


def call_progress() -> CallProgress | None:
    """The progress record of the call being made, or None outside a run."""
    return _PROGRESS.get()


def capped(own: int | None) -> int | None:
    """The cap a client sends: its own setting from ``backend_kwargs`` when it has one, else the run's."""
    return own if own is not None else reply_cap()
