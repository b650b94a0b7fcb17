"""A LangChain conversation as the RLM's context, the root model's question and its instructions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from rlm_adapters.hosting import conversation_input


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(message.type, message.type)


def _json_data(value: Any) -> Any:
    """`value` as plain JSON data (a tool call's arguments may hold objects a user put there)."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):
        return str(value)


def message_entry(message: BaseMessage) -> dict[str, Any]:
    """One message as an entry of `context`: role and text, with a tool call's or a tool result's fields."""
    entry: dict[str, Any] = {"role": _role(message), "content": message.text}
    if isinstance(message, AIMessage) and message.tool_calls:
        entry["tool_calls"] = [
            {"id": call.get("id"), "name": call["name"], "args": _json_data(call["args"])}
            for call in message.tool_calls
        ]
    if isinstance(message, ToolMessage):
        entry["tool_call_id"] = message.tool_call_id
        if message.name:
            entry["name"] = message.name
        if message.status == "error":
            entry["status"] = "error"
    return entry


def conversation_to_context(messages: Sequence[BaseMessage]) -> tuple[Any, str, str | None]:
    """Split a conversation into the RLM's context, the root model's question and its instructions.

    One human message becomes its text; several messages become ``[{"role", "content"}, ...]`` (an AI
    message's tool calls as ``tool_calls``, a tool result's ``tool_call_id`` and ``name`` beside them).
    System messages become instructions; the question asks for an answer to the last human message.

    Args:
        messages: The conversation, as LangChain messages.

    Returns:
        The context, the query for the root model, and the joined system texts (None when there are none).

    Raises:
        ValueError: The conversation has no human message.
    """
    system = [m.text for m in messages if isinstance(m, SystemMessage) and m.text]
    context, query = conversation_input(chat_entries(messages))
    return context, query, "\n\n".join(system) or None


def chat_entries(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The conversation's entries without its system messages (which become instructions): the context's
    entries, and what the direct route sends as chat messages."""
    return [message_entry(m) for m in messages if not isinstance(m, SystemMessage)]


def continued_context(messages: Sequence[BaseMessage], new: Sequence[BaseMessage]) -> tuple[Any, str]:
    """The context and question of a thread's later step, when the REPL holds its earlier messages.

    The new messages become a list of entries, as in `conversation_to_context` (a single human message:
    its text).

    Args:
        messages: The whole conversation (for the question).
        new: Its messages the thread's REPL has not been given yet.
    """
    entries = [message_entry(m) for m in messages if not isinstance(m, SystemMessage)]
    return conversation_input(entries, [message_entry(m) for m in new if not isinstance(m, SystemMessage)])
