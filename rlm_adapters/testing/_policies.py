"""How the fake model servers answer: scripted root replies by turn, a leaf policy, and token counts.

A request whose system message is the RLM's (`ROOT_MARKER`) is a *root* request, answered by a `RootPolicy`
of its messages (`scripted_root` plays replies by turn); every other request is a *leaf*, answered by a
`LeafPolicy` of its last user message (`default_leaf` finds the magic number in it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

RootPolicy = Callable[[list[dict[str, Any]]], str]
LeafPolicy = Callable[[str], str]
ROOT_MARKER = "stored in a Python REPL as the variable `context`"
_NUMBER = re.compile(r"magic number[^0-9]{0,40}?(\d{3,})", re.IGNORECASE)


def default_leaf(prompt: str) -> str:
    """Answers from the prompt: the magic number it holds, else ``NONE``."""
    match = _NUMBER.search(prompt)
    return match.group(1) if match else "NONE"


def turn_of(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many assistant replies a conversation already has (0 for its first turn)."""
    return sum(1 for m in messages if m.get("role") == "assistant")


def scripted_root(replies: Sequence[str]) -> Callable[[Sequence[Mapping[str, Any]]], str]:
    """A root policy playing `replies` by turn (the last one repeats); also a `ScriptedModel`'s function."""
    items = list(replies)

    def policy(messages: Sequence[Mapping[str, Any]]) -> str:
        return items[min(turn_of(messages), len(items) - 1)]

    return policy


def is_root(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a request is the RLM's root call: its system message is the RLM's."""
    return bool(messages) and messages[0].get("role") == "system" and ROOT_MARKER in text_of(messages[0].get("content"))


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or OpenAI-style content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def tokens(text: str) -> int:
    """The tokens the servers bill for `text`: about four characters each, at least one."""
    return max(1, math.ceil(len(text) / 4))
