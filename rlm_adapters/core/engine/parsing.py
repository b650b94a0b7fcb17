"""Reading the root model's replies: code blocks to run and final answers written as text.

A final answer written as text counts only when it is the model's own words. The untrusted context is
where injected instructions live, and a model that quotes it must not end the run by quoting: so
``FINAL(`` counts only at the start of a line (at most three spaces of indent, optional ``*`` / ``_``
emphasis), outside every fenced block (closed or not, executed or not), outside ``>`` quotes and
indented code, and only when its line does not repeat text of the context.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlm_adapters.core.engine.fences import Scan, scan
from rlm_adapters.core.settings import CodeFences

# The one place that says which fenced blocks run; the system prompt quotes FENCE_RULES.
# ``any`` (ours): ```repl, ```python / ```py / ```python3 and bare fences; ``repl``: only ```repl, as the reference.
RUNNABLE_TAGS = frozenset({"", "repl", "python", "py", "python3"})
FENCE_TAGS: dict[str, frozenset[str]] = {"any": RUNNABLE_TAGS, "repl": frozenset({"repl"})}
FENCE_RULES: dict[str, str] = {
    "any": "```repl, ```python (or ```py / ```python3) and bare ``` fences run; any other language tag is not run",
    "repl": "only ```repl fences run; a block with any other language tag, or none, is not run",
}
FENCE_RULE = FENCE_RULES["any"]
_FINAL_START = re.compile(r"^ {0,3}[*_]*(FINAL_VAR|FINAL)\(", re.MULTILINE)
# A fence still open at the end of a reply: everything after it is code, not prose.
_OPEN_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)
_TILDE_FENCE = re.compile(r"^[ \t]*~~~[^\n]*\n.*?^[ \t]*~~~[ \t]*$", re.DOTALL | re.MULTILINE)

# Tells whether a line of a reply repeats text of the context (then it is a quote, not the model's words).
QuoteCheck = Callable[[str], bool]


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


def find_code_blocks(reply: str, fences: CodeFences = "any", *, truncated: bool = False) -> list[str]:
    """The reply's runnable fenced blocks, in order (see `FENCE_RULES` and `fences.scan`)."""
    return scan_blocks(reply, fences, truncated=truncated).code


def scan_blocks(reply: str, fences: CodeFences = "any", *, truncated: bool = False) -> Scan:
    """Every fenced block of the reply, which run, and the notes for the model (`fences.scan`)."""
    return scan(reply, FENCE_TAGS[fences], truncated=truncated)


def strip_code_blocks(reply: str) -> str:
    """The reply with every closed ``` block removed."""
    blocks = [b for b in scan(reply, RUNNABLE_TAGS).blocks if b.closed and b.start < len(reply)]
    if not blocks:
        return reply
    kept, position = [], 0
    for block in blocks:
        kept.append(reply[position : block.start])
        position = block.end
    kept.append(reply[position:])
    return "".join(kept)


def prose_of(reply: str) -> str:
    """The reply without its fenced blocks (closed ones, ``~~~`` ones, and an unclosed one to the end)."""
    prose = _TILDE_FENCE.sub("", strip_code_blocks(reply))
    unclosed = _OPEN_FENCE.search(prose)
    return prose if unclosed is None else prose[: unclosed.start()]


def find_final_in_text(reply: str, is_quoted: QuoteCheck | None = None) -> FinalInText | None:
    """A line starting with FINAL(...) or FINAL_VAR(...) in the model's own prose; nested parentheses are
    allowed. See the module docstring for what is not the model's own (quotes, fences, the context).

    Args:
        reply: The model's reply.
        is_quoted: True for a line that repeats text of the context; such a line never ends the run.
    """
    prose = prose_of(reply)
    for match in _FINAL_START.finditer(prose):
        argument = _balanced(prose, match.end())
        if argument is None:
            continue
        line_end = prose.find("\n", match.end())
        line = prose[match.start() : len(prose) if line_end < 0 else line_end].strip()
        if is_quoted is not None and (is_quoted(line) or is_quoted(line.strip("*_ "))):
            continue
        kind: Literal["FINAL", "FINAL_VAR"] = "FINAL_VAR" if match.group(1) == "FINAL_VAR" else "FINAL"
        return FinalInText(kind, argument.strip())
    return None


def quote_check(context_text: Callable[[], str | list[str]]) -> QuoteCheck:
    """A `QuoteCheck` over the context: `context_text` gives its text (or its texts), asked once, lazily."""
    cache: list[str | list[str]] = []

    def is_quoted(line: str) -> bool:
        if not line:
            return False
        if not cache:
            cache.append(context_text())
        texts = cache[0]
        return any(line in text for text in ([texts] if isinstance(texts, str) else texts))

    return is_quoted


def context_texts(context: Any) -> list[str]:
    """Every string in the context (keys and values of nested lists and dicts), for the quote check."""
    texts: list[str] = []
    stack = [context]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return texts


def _balanced(text: str, start: int) -> str | None:
    """The text from `start` up to the parenthesis closing the one just before it."""
    end = closing_index(text, start)
    if end is not None:
        return text[start:end]
    # An unclosed FINAL( at the end of a reply: take the rest of the line as the answer.
    rest = text[start:].split("\n", 1)[0]
    return rest if rest.strip() else None


def closing_index(
    text: str, start: int, opening: str = "(", closing: str = ")", limit: int | None = None
) -> int | None:
    """Where the bracket opened just before `start` closes, skipping quoted strings (triple-quoted and
    escaped ones too); None when it does not close within `limit` characters (None: the end of `text`)."""
    depth = 1
    quote: str | None = None
    index = start
    end = len(text) if limit is None else min(len(text), start + limit)
    while index < end:
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
        elif char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


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


def clean_answer(text: str, is_quoted: QuoteCheck | None = None) -> str:
    """A free-text answer without code fences or a FINAL(...) wrapper (a quoted FINAL is left as text)."""
    final = find_final_in_text(text, is_quoted)
    if final is not None and final.kind == "FINAL":
        return final_text(final.argument)
    without_fences = re.sub(r"```[\w+.-]*\n?", "", text)
    return without_fences.strip()
