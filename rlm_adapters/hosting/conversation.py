"""A chat conversation as an RLM's context and the root model's question (for the chat model adapters).

The adapters turn their messages into entries, ``{"role", "content"}`` dicts (a call of the caller's tools
adds ``tool_calls``, a tool's result ``tool_call_id`` and ``name``); this module makes the context of a
run from them and the question that goes with it: answer the user's last message, which is quoted (both
ends of a long one), and read the tool results the conversation ends with in the REPL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlm_adapters.core.adapter_kit import Conversation
from rlm_adapters.errors import ContextError

QUOTED_QUESTION_CHARS = 4_000
ENTRY_KEYS = "{'role', 'content'} dicts (tool calls and results also carry 'tool_calls' / 'tool_call_id', 'name')"
EARLIER = "the earlier messages of the conversation are in the earlier context_N variables"


def conversation_input(
    entries: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]] | None = None
) -> tuple[Any, str]:
    """The context and the question of a run over a conversation (system messages already taken out).

    One user message is its text; several messages are a list of the entries. With `new`, the run
    continues a thread whose REPL holds the rest: the context is only `new` (the same rule), and the
    question says where the earlier messages are.

    Args:
        entries: The whole conversation, in order.
        new: Its entries the thread's REPL has not been given yet (None: a run over all of it).

    Raises:
        ValueError: The conversation has no user message.
        ContextError: The last user message is empty (or only whitespace): there is nothing to answer, and a
            run would spend a model call finding that out.
    """
    users = [entry for entry in entries if entry.get("role") == "user"]
    if not users:
        raise ValueError("a chat model over an RLM needs at least one human message (role 'user') to answer")
    last = str(users[-1].get("content", ""))
    if not last or last.isspace():
        raise ContextError(
            f"the last human message (role 'user') is empty ({len(last)} characters of whitespace): a chat model "
            "over an RLM answers it; give it the question, or the text to reason over"
        )
    given = entries if new is None else new
    single = len(given) == 1 and given[0].get("role") == "user"
    context: Any = str(given[0].get("content", "")) if single else Conversation(dict(entry) for entry in given)
    if new is None:
        where = (
            "`context` is the user's message (a string)"
            if single
            else f"`context` is the conversation so far (a list of {ENTRY_KEYS})"
        )
    elif single:
        where = f"`context` is the user's new message in this thread (a string); {EARLIER}"
    else:
        where = (
            f"`context` holds the {len(given)} message(s) of this conversation that are new since your last turn "
            f"in this thread (a list of {ENTRY_KEYS}); {EARLIER}"
        )
    return context, _question(where, entries, last)


def _question(where: str, entries: Sequence[Mapping[str, Any]], last: str) -> str:
    parts = [f"{where}."]
    results: list[Mapping[str, Any]] = []
    for entry in reversed(entries):
        if entry.get("role") != "tool":
            break
        results.insert(0, entry)
    if results:
        names = ", ".join(sorted({str(entry.get("name") or "a tool") for entry in results}))
        parts.append(
            f"It ends with {len(results)} tool result(s) (from {names}) for calls made in the previous turn: "
            "read them from `context` in the REPL (they may be long), then answer or call more tools."
        )
    if len(last) <= QUOTED_QUESTION_CHARS:
        quoted = last
    else:
        # Long messages usually hold a document with the request before or after it: show both ends.
        half = QUOTED_QUESTION_CHARS // 2
        quoted = f"{last[:half]}\n[... {len(last) - 2 * half:,} characters only in `context` ...]\n{last[-half:]}"
    parts.append(f"Answer the user's last message, using the data in `context`. It reads:\n\n{quoted}")
    return " ".join(parts)
