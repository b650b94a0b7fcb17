"""A provider's reply read defensively: its text and token counts are taken, anything else is a `ModelError`.

Providers and the proxies in front of them send more than plain strings. OpenAI-compatible servers may send a
message's content as content parts (``[{"type": "text", "text": ...}]``), Anthropic and Bedrock send blocks,
Gemini parts, and a broken proxy numbers, nulls, or counts that are not counts. The text parts are joined;
thinking and reasoning parts are not the answer and are skipped; anything else (an image, a tool call, a
number) is refused by name, so that the run ends with ``finish_reason="error"`` and a message saying what came,
instead of a `TypeError` deep in the engine. A token count that is not a whole number between 0 and
`MAX_TOKEN_COUNT` is replaced by an estimate from the text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import Any

from rlm_adapters.core.lm._common import estimated_input
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.errors import ModelError, RLMError

MAX_TOKEN_COUNT = 10**9  # more than any model's context plus reply: a larger count is not a count
SHOWN_CHARS = 200  # how much of an unreadable value an error message quotes
# Part types whose text is the reply (OpenAI chat and Responses, Anthropic, Bedrock and Gemini have no type).
TEXT_PARTS = frozenset({"text", "output_text"})
# Part types that are not the answer: the model's thinking, kept out of the reply as the SDKs' `.text` does.
SKIPPED_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning", "reasoningContent"})
# The stop reasons that mean "cut at the token cap": OpenAI-compatible ``finish_reason``, Anthropic's and
# Bedrock's ``stop_reason`` / ``stopReason``, Gemini's ``finish_reason`` (an enum whose name is this).
CAP_STOP_REASONS = frozenset({"length", "max_tokens", "MAX_TOKENS", "model_context_window_exceeded"})


def cut_at_cap(reason: Any) -> bool:
    """Whether a provider's stop reason says the reply was cut at its token cap (an enum counts by name)."""
    name = getattr(reason, "name", reason)
    return isinstance(name, str) and name in CAP_STOP_REASONS


def shown(value: Any) -> str:
    """`value` for an error message: its type and its repr, cut to `SHOWN_CHARS`."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__ must not hide the real error
        text = object.__repr__(value)
    cut = f"... [+{len(text) - SHOWN_CHARS} chars]" if len(text) > SHOWN_CHARS else ""
    return f"{type(value).__name__} {text[:SHOWN_CHARS]}{cut}"


def field_of(value: Any, name: str) -> Any:
    """``value[name]`` for a mapping, else ``value.name``; None when it has none (a reply may lack anything)."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _part_text(part: Any) -> str | None:
    """The text of one content part; "" for a part that is not the answer; None for one that cannot be read."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping) and not hasattr(part, "type") and not hasattr(part, "text"):
        return None
    kind = field_of(part, "type")
    if kind in SKIPPED_PARTS or (kind is None and any(field_of(part, k) is not None for k in SKIPPED_PARTS)):
        return ""
    if field_of(part, "thought") is True:  # Gemini's thought summaries
        return ""
    if kind == "refusal":  # OpenAI: the model declined, in words; that is its reply
        refusal = field_of(part, "refusal")
        return refusal if isinstance(refusal, str) else None
    if kind is None or kind in TEXT_PARTS:
        text = field_of(part, "text")
        return text if isinstance(text, str) else None
    return None


def reply_text(content: Any, *, source: str, model: str) -> str:
    """The text of a reply's content: a string, None (no text), or a list of text parts.

    Args:
        content: What the provider sent as the message's content.
        source: Who sent it, for the message (``"OpenAI call to model 'gpt-5'"``).
        model: For `ModelError.model`.

    Raises:
        ModelError: for content that is neither text nor text parts, quoting what came (cut).
    """
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list | tuple):
        texts = []
        for part in content:
            text = _part_text(part)
            if text is None:
                raise ModelError(
                    f"{source} returned a content part the engine cannot read: {shown(part)} "
                    "(expected text parts; is the model asked for tools or images?)",
                    model=model,
                )
            texts.append(text)
        return "".join(texts)
    raise ModelError(
        f"{source} returned message content that is not text: {shown(content)} (expected a string or text parts)",
        model=model,
    )


def token_count(value: Any) -> int | None:
    """A provider's token count, or None when it is not a whole number between 0 and `MAX_TOKEN_COUNT`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    return int(value) if 0 <= value <= MAX_TOKEN_COUNT else None


def usage_field(usage: Any, *path: str) -> int:
    """A token count inside a provider's usage, object or dict (``prompt_tokens_details``, ``cached_tokens``);
    0 when it is missing or not a count (`token_count`)."""
    value = usage
    for name in path:
        value = value.get(name) if isinstance(value, Mapping) else getattr(value, name, None)
        if value is None:
            return 0
    return token_count(value) or 0


def with_cache_tokens(plain: Any, read: int, write: int) -> Any:
    """The whole prompt's input tokens where a provider reports the cache's reads and writes apart from them
    (Anthropic, Bedrock Converse); a `plain` that is not a count is left for `reply_of` to refuse."""
    return plain + read + write if isinstance(plain, int) and not isinstance(plain, bool) else plain


def openai_cache_reads(usage: Any) -> int:
    """The prompt tokens OpenAI's automatic prompt cache served (``prompt_tokens_details.cached_tokens``;
    Azure OpenAI, OpenRouter and LiteLLM report it the same way). They are part of ``prompt_tokens``."""
    return usage_field(usage, "prompt_tokens_details", "cached_tokens")


def reply_of(
    text: str, *, model: str, messages: list[Message], input_tokens: Any, output_tokens: Any, **extra: Any
) -> LMResponse:
    """An `LMResponse` with the provider's counts where they are counts (`token_count`), else estimates from
    the messages sent and the reply's text; `extra` are its other fields (``cost``, ``near_rate_limit``)."""
    reported_in, reported_out = token_count(input_tokens), token_count(output_tokens)
    return LMResponse(
        text=text,
        input_tokens=estimated_input(messages) if reported_in is None else reported_in,
        output_tokens=estimate_tokens(text) if reported_out is None else reported_out,
        model=model,
        **extra,
    )


def check_text_size(text: str, limit: int, *, source: str, model: str) -> str:
    """`text`, or a `ModelError` when it is longer than `limit` characters (for clients whose library reads the
    reply itself, so that the cap can only be checked once the reply is in)."""
    if len(text) > limit:
        raise ModelError(
            f"{source} returned a reply of {len(text):,} characters, over max_reply_bytes={limit:,} "
            "(raise max_reply_bytes in backend_kwargs if such replies are expected)",
            model=model,
        )
    return text


@contextlib.contextmanager
def reading(source: str, model: str) -> Iterator[None]:
    """Turn any error raised while reading a reply into a `ModelError` naming `source` (RLM errors pass)."""
    try:
        yield
    except RLMError:
        raise
    except Exception as exc:
        detail = str(exc)[:SHOWN_CHARS]
        raise ModelError(
            f"{source} returned a reply that could not be read ({type(exc).__name__}: {detail})", model=model
        ) from exc


def checked_response(response: Any, *, model: str, input_estimate: int) -> LMResponse:
    """A client's `LMResponse`, checked before the engine uses it (a client of the user's may be careless).

    Text must be a string (else `ModelError`); token counts that are not counts become estimates (cache counts
    become 0), a cost that
    is not a finite non-negative number becomes None (the engine's price table), a model name that is not a
    string becomes the client's.

    Args:
        response: What the client returned.
        model: The client's model name.
        input_estimate: The input tokens estimated from the messages sent.
    """
    if not isinstance(response, LMResponse):
        raise ModelError(f"the client of model {model!r} returned {shown(response)}, not an LMResponse", model=model)
    if not isinstance(response.text, str):
        raise ModelError(
            f"the client of model {model!r} returned reply text that is not a string: {shown(response.text)}",
            model=model,
        )
    fixes: dict[str, Any] = {}
    for name, fallback in (("input_tokens", input_estimate), ("output_tokens", None)):
        value = getattr(response, name)
        count = token_count(value)
        if count is None:
            fixes[name] = estimate_tokens(response.text) if fallback is None else fallback
        elif type(value) is not int:
            fixes[name] = count
    cost = response.cost
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost) or cost < 0
    ):
        fixes["cost"] = None
    if not isinstance(response.model, str) or not response.model:
        fixes["model"] = model
    if not isinstance(response.near_rate_limit, bool):
        fixes["near_rate_limit"] = response.near_rate_limit == 1
    if not isinstance(response.truncated, bool):
        fixes["truncated"] = response.truncated is True or response.truncated == 1
    for name in ("cache_read_tokens", "cache_write_tokens"):  # not counts: nothing came from a cache
        value = getattr(response, name)
        if token_count(value) is None or type(value) is not int:
            fixes[name] = token_count(value) or 0
    return dataclasses.replace(response, **fixes) if fixes else response
