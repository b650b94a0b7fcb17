"""Reading the root model's replies: code blocks to run and final answers written as text."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, Literal

# The one place that says which fenced blocks run; the system prompt quotes FENCE_RULES.
# ``any`` (ours): ```repl, ```python / ```py / ```python3 and bare fences; ``repl``: only ```repl, as the reference.
CodeFences = Literal["any", "repl"]
RUNNABLE_TAGS = frozenset({"", "repl", "python", "py", "python3"})
FENCE_TAGS: dict[str, frozenset[str]] = {"any": RUNNABLE_TAGS, "repl": frozenset({"repl"})}
FENCE_RULES: dict[str, str] = {
    "any": "```repl, ```python (or ```py / ```python3) and bare ``` fences run; any other language tag is not run",
    "repl": "only ```repl fences run; a block with any other language tag, or none, is not run",
}
FENCE_RULE = FENCE_RULES["any"]
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_FINAL_START = re.compile(r"^[ \t>*_`]*(FINAL_VAR|FINAL)\(", re.MULTILINE)


@dataclass(frozen=True)
class FinalInText:
    """A final answer written as text outside code."""

    kind: Literal["FINAL", "FINAL_VAR"]
    argument: str


class Conversation(list):  # type: ignore[type-arg]
    """A list of ``{"role", "content"}`` dicts meant as the context itself, kept as dicts (ChatRLM's)."""


def flatten_messages(prompt: Any) -> Any:
    """A list of ``{"content": ...}`` message dicts becomes the list of their contents, as the reference
    RLM does with a message-list prompt; a `Conversation` and anything else are returned unchanged."""
    if isinstance(prompt, Conversation):
        return list(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt):
        return [m.get("content", "") for m in prompt]
    return prompt


def find_code_blocks(reply: str, fences: CodeFences = "any") -> list[str]:
    """The reply's runnable fenced blocks, in order (see `FENCE_RULES`)."""
    tags = FENCE_TAGS[fences]
    return [m.group(2) for m in _FENCE.finditer(reply) if m.group(1).lower() in tags]


def strip_code_blocks(reply: str) -> str:
    """The reply with every fenced block removed."""
    return _FENCE.sub("", reply)


def find_final_in_text(reply: str) -> FinalInText | None:
    """A line starting with FINAL(...) or FINAL_VAR(...) outside code; nested parentheses are allowed."""
    prose = strip_code_blocks(reply)
    for match in _FINAL_START.finditer(prose):
        argument = _balanced(prose, match.end())
        if argument is None:
            continue
        kind: Literal["FINAL", "FINAL_VAR"] = "FINAL_VAR" if match.group(1) == "FINAL_VAR" else "FINAL"
        return FinalInText(kind, argument.strip())
    return None


def _balanced(text: str, start: int) -> str | None:
    """The text from `start` up to the parenthesis closing the one just before it."""
    depth = 1
    quote: str | None = None
    index = start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif text.startswith(quote, index):
                index += len(quote) - 1
                quote = None
        elif text.startswith('"""', index) or text.startswith("'''", index):
            quote = text[index : index + 3]
            index += 2
        elif char in "\"'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return text[start:index]
        index += 1
    # An unclosed FINAL( at the end of a reply: take the rest of the line as the answer.
    rest = text[start:].split("\n", 1)[0]
    return rest if rest.strip() else None


def final_text(argument: str) -> str:
    """The answer inside FINAL(...): a quoted literal is unquoted, anything else is taken as written."""
    stripped = argument.strip()
    if stripped[:1] in "\"'" or stripped[:2].lower() in ("f'", 'f"', "r'", 'r"'):
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, SyntaxError):
            return stripped
        return value if isinstance(value, str) else str(value)
    return stripped


def clean_answer(text: str) -> str:
    """A free-text answer without code fences or a FINAL(...) wrapper."""
    final = find_final_in_text(text)
    if final is not None and final.kind == "FINAL":
        return final_text(final.argument)
    without_fences = re.sub(r"```[\w+.-]*\n?", "", text)
    return without_fences.strip()
