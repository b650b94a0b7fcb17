"""Shared pieces of the ported reference tests: scripted models that play the reference's replies."""

from __future__ import annotations

from typing import Any

from rlm_adapters import RLM, Message, ScriptedModel, testing
from rlm_adapters.core.lm.scripted import Reply


def final(content: str) -> str:
    """A reply submitting `content` with the reference's answer-dict protocol (as its tests render it)."""
    return f"```repl\nanswer['content'] = {content!r}\nanswer['ready'] = True\n```"


def by_turn(*replies: str, model_name: str = "test-model") -> ScriptedModel:
    """A root model replying by turn of its own conversation (the last reply repeats), named as the
    reference's tests name theirs."""
    return testing.by_turn(*replies, model_name=model_name)


def echo_leaf(messages: list[Message]) -> Reply:
    return f"leaf: {messages[-1]['content'][:40]}"


def make(root: ScriptedModel, **kwargs: Any) -> RLM:
    """An RLM on the trusted in-process sandbox (the reference's default) with an echoing sub-model."""
    kwargs.setdefault("environment", "local")
    kwargs.setdefault("other_backends", [ScriptedModel(echo_leaf, model_name="leaf")])
    return RLM(backend=root, **kwargs)


def user_text(messages: list[Message]) -> str:
    """Every user message of one conversation, joined."""
    return " ".join(m["content"] for m in messages if m["role"] == "user")
