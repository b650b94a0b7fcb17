"""A LangChain conversation as the RLM's context, the root model's question and its instructions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from rlm_adapters.core.parsing import Conversation

QUOTED_QUESTION_CHARS = 4_000


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(message.type, message.type)


def conversation_to_context(messages: Sequence[BaseMessage]) -> tuple[Any, str, str | None]:
    """Split a conversation into the RLM's context, the root model's question and its instructions.

    One human message becomes its text; several messages become ``[{"role", "content"}, ...]``.
    System messages become instructions; the question asks for an answer to the last human message.

    Args:
        messages: The conversation, as LangChain messages.

    Returns:
        The context, the query for the root model, and the joined system texts (None when there are none).

    Raises:
        ValueError: The conversation has no human message.
    """
    system = [m.text for m in messages if isinstance(m, SystemMessage) and m.text]
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    humans = [m for m in rest if isinstance(m, HumanMessage)]
    if not humans:
        raise ValueError("ChatRLM needs at least one human message to answer")
    last = str(humans[-1].text)
    if len(rest) == 1:
        context: Any = last
        where = "`context` is the user's message (a string)"
    else:
        # A Conversation stays a list of dicts (a plain one would be flattened, as the reference RLM does).
        context = Conversation({"role": _role(m), "content": m.text} for m in rest)
        where = "`context` is the conversation so far (a list of {'role', 'content'} dicts)"
    if len(last) <= QUOTED_QUESTION_CHARS:
        quoted = last
    else:
        # Long messages usually hold a document with the request before or after it: show both ends.
        half = QUOTED_QUESTION_CHARS // 2
        quoted = f"{last[:half]}\n[... {len(last) - 2 * half:,} characters only in `context` ...]\n{last[-half:]}"
    query = f"{where}. Answer the user's last message, using the data in `context`. It reads:\n\n{quoted}"
    return context, query, "\n\n".join(system) or None
