"""A Chat Completions request, checked field by field: each field the OpenAI API accepts is used or refused.

`parse_request` reads the JSON body into a `ChatRequest`. Nothing is ignored: a field this server cannot
honour (``n=2``, ``logprobs``, audio, images, ``functions``) is refused with an OpenAI-style 400 naming it,
and a field the API does not have is refused as OpenAI does (``Unrecognized request argument supplied``).
What each accepted field does (docs/serve.md has the table):

- ``messages``: the conversation, which becomes the RLM's context (`conversation_entries`); system and
  developer messages become instructions.
- ``temperature``, ``top_p``, ``seed``, ``frequency_penalty``, ``presence_penalty``, ``reasoning_effort``,
  ``verbosity``: sent with every model call of the run (root and sub-models).
- ``max_completion_tokens`` / ``max_tokens``: the answer is cut at that many tokens (``finish_reason:
  "length"``); the run's own calls are bounded by the served model's limits instead.
- ``stop``: the answer is cut before the first stop sequence.
- ``stream``, ``stream_options.include_usage``: server-sent events.
- ``tools``, ``tool_choice``, ``parallel_tool_calls``: the caller's tools (`core.tool_calls`).
- ``response_format``: ``json_schema`` and ``json_object`` become the run's typed output.
- ``user``, ``safety_identifier``, ``metadata``, ``prompt_cache_key``: labels, checked and written to the
  server's log line of the request (never sent upstream).
- ``store``, ``service_tier``, ``logprobs``, ``n``, ``modalities``, ... : accepted at the values that ask
  for nothing this server lacks (``store: false``, ``n: 1``, ``modalities: ["text"]``), else refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlm_adapters.serve.errors import OpenAIError, invalid

# Sent with every model call of the run: each OpenAI range checked here, before any run starts.
SAMPLING_RANGES: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "frequency_penalty": (-2.0, 2.0),
    "presence_penalty": (-2.0, 2.0),
}
# Sent with every model call too, at one of the values OpenAI's API takes (openai's `ReasoningEffort`).
SAMPLING_CHOICES: dict[str, tuple[str, ...]] = {
    "reasoning_effort": ("none", "minimal", "low", "medium", "high", "xhigh", "max"),
    "verbosity": ("low", "medium", "high"),
}
# JSON values a body may hold: parsed, about 70 bytes each at most (`count_values`).
MAX_JSON_VALUES = 1_000_000
_CHUNK = 256 * 1024  # bytes of a body read at once by `_outside_strings`
LABELS = ("user", "safety_identifier", "prompt_cache_key")
MAX_LABEL_CHARS = 512
MAX_STOP = 4
# Fields accepted only at a value that asks for nothing: the value allowed, and why others are refused.
INERT: dict[str, tuple[tuple[Any, ...], str]] = {
    "n": ((None, 1), "this server makes one choice per request; send n=1 or leave it out"),
    "store": ((None, False), "this server stores no completions (the stored-completions API is not served)"),
    "logprobs": ((None, False), "an RLM's answer is not one model's sampled tokens: it has no logprobs"),
    "top_logprobs": ((None, 0), "an RLM's answer has no logprobs"),
    "logit_bias": ((None,), "an RLM's answer is not one model's sampled tokens; logit_bias has no meaning here"),
    "service_tier": ((None, "auto", "default"), "this server has one service tier: send 'auto' or leave it out"),
    "audio": ((None,), "this server answers in text only"),
    "prediction": ((None,), "predicted outputs are not supported by an RLM"),
    "web_search_options": ((None,), "this server does no web search"),
    "prompt_cache_retention": ((None,), "the provider's prompt cache is the server's business (see --cache)"),
    "prompt_cache_options": ((None,), "the provider's prompt cache is the server's business (see --cache)"),
    "moderation": ((None,), "this server runs no moderation"),
    "function_call": ((None,), "the deprecated function_call is not supported: use tools and tool_choice"),
    "functions": ((None,), "the deprecated functions are not supported: use tools and tool_choice"),
}
KNOWN = frozenset(
    {"messages", "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "stop", "tools",
     "tool_choice", "parallel_tool_calls", "response_format", "metadata", "modalities", *SAMPLING_RANGES,
     *SAMPLING_CHOICES, "seed", *LABELS, *INERT}
)  # fmt: skip
MESSAGE_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}


@dataclass(frozen=True)
class ChatRequest:
    """One checked Chat Completions request.

    Attributes:
        model: The served model's name the client asked for.
        entries: The conversation without its system messages, as the engine's ``{"role", "content"}`` entries.
        instructions: The system and developer messages' text, joined (None without any).
        stream: Answer with server-sent events.
        include_usage: Send a last chunk with the usage (``stream_options.include_usage``).
        sampling: Options sent with every model call of the run.
        max_answer_tokens: Cut the answer at this many tokens (None: no cut).
        stop: Cut the answer before the first of these.
        tools: The caller's tools, as OpenAI tool dicts (None: none).
        tool_choice: ``auto``, ``required``, ``none`` or a tool's name (None: not given).
        parallel_tool_calls: Several calls in one turn allowed.
        output_schema: The JSON schema of a typed answer (``response_format``), or None for text.
        labels: ``user``, ``safety_identifier``, ``prompt_cache_key`` and ``metadata`` as sent, for the log.
    """

    model: str
    entries: list[dict[str, Any]]
    instructions: str | None = None
    stream: bool = False
    include_usage: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    max_answer_tokens: int | None = None
    stop: tuple[str, ...] = ()
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | None = None
    parallel_tool_calls: bool = True
    output_schema: dict[str, Any] | None = None
    labels: dict[str, Any] = field(default_factory=dict)


def parse_body(body: bytes) -> Any:
    """The request's JSON (OpenAI's words when it is not JSON), once `count_values` has bounded its size."""
    count_values(body)
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
            "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"
        ) from None


def count_values(body: bytes) -> None:
    """Refuse a body with more than `MAX_JSON_VALUES` JSON values, before it is parsed.

    Parsed, each value is a Python object of 30 to 70 bytes: 60 MB of ``{},`` is 20 million dicts, 1.4 GB.
    Each value but the first follows a ``,`` or opens with ``[`` / ``{``, so their count outside strings
    bounds the values; counting them in the raw bytes (inside strings too) is an upper bound found at the
    speed of memory, and only a body over it is read again to count them outside strings (`_outside_strings`).

    Raises:
        OpenAIError: 400 naming the bound.
    """
    rough = body.count(b",") + body.count(b"[") + body.count(b"{")
    if rough > MAX_JSON_VALUES and _outside_strings(body) > MAX_JSON_VALUES:
        raise invalid(
            f"the request body holds more than {MAX_JSON_VALUES:,} JSON values (messages, content parts, strings, "
            "numbers): send fewer, longer ones",
            code="request_too_large",
        )


def _outside_strings(body: bytes) -> int:
    """The ``,`` ``[`` ``{`` of `body` outside its JSON strings (stops counting past `MAX_JSON_VALUES`).

    Escaped backslashes, then escaped quotes, are taken out first (a run of backslashes leaves one when
    it escapes the next character), so each ``"`` left opens or closes a string. The text is then read in
    chunks, so that a body of millions of short strings is never millions of Python objects at once.
    """
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    count, inside = 0, False
    for start in range(0, len(text), _CHUNK):
        pieces = text[start : start + _CHUNK].split(b'"')
        outside = b"".join(pieces[1 if inside else 0 :: 2])
        count += outside.count(b",") + outside.count(b"[") + outside.count(b"{")
        if count > MAX_JSON_VALUES:
            break
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes in the chunk
    return count


def parse_request(body: bytes) -> ChatRequest:
    """Check a ``POST /v1/chat/completions`` body.

    Raises:
        OpenAIError: The first field that is missing, of the wrong type, out of range, unknown, or asking for
            something this server cannot do (status 400, ``param`` naming it).
    """
    data = parse_body(body)
    if not isinstance(data, dict):
        raise invalid(f"the request body must be a JSON object, got {_kind(data)}")
    unknown = sorted(set(data) - KNOWN)
    if unknown:
        raise invalid(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0])
    for name, (allowed, why) in INERT.items():
        value = data.get(name)
        if name == "logit_bias" and value == {}:
            continue
        if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
            raise invalid(f"{name}={_shown(value)} is not supported: {why}", name)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("you must provide a model parameter (the name of a served model, see GET /v1/models)", "model")
    stream = _optional_bool(data, "stream") or False
    include_usage = _stream_options(data.get("stream_options"), stream)
    modalities = data.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise invalid(
            f"modalities={_shown(modalities)} is not supported: this server answers in text only", "modalities"
        )
    instructions, entries = conversation_entries(data.get("messages"))
    tools = _tools(data.get("tools"))
    return ChatRequest(
        model=model,
        entries=entries,
        instructions=instructions,
        stream=stream,
        include_usage=include_usage,
        sampling=_sampling(data),
        max_answer_tokens=_max_tokens(data),
        stop=_stop(data.get("stop")),
        tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), tools),
        parallel_tool_calls=_optional_bool(data, "parallel_tool_calls") is not False,
        output_schema=_response_format(data.get("response_format")),
        labels=_labels(data),
    )


def conversation_of(body: bytes) -> list[dict[str, Any]]:
    """The conversation's entries of a body `parse_request` accepted, read again (a request waiting for a
    run slot keeps its bytes, not the parsed messages, which are many times bigger)."""
    data = parse_body(body)
    _instructions, entries = conversation_entries(data.get("messages") if isinstance(data, dict) else None)
    return entries


def conversation_entries(messages: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """The instructions (system and developer text) and the engine's entries of OpenAI ``messages``.

    An assistant message's ``tool_calls`` become ``[{"id", "name", "args"}]`` (the arguments parsed from their
    JSON text, or kept as text when they are not JSON), a tool message keeps its ``tool_call_id``.

    Raises:
        OpenAIError: Not a list of messages, an unknown role or key, a content part that is not text, no
            user message, a last user message that is empty.
    """
    if not isinstance(messages, list) or not messages:
        raise invalid("messages must be a non-empty array of messages", "messages")
    system: list[str] = []
    entries: list[dict[str, Any]] = []
    last_user: int | None = None  # the index of the message the RLM answers
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(f"{where} must be an object with a role and content, got {_kind(message)}", where)
        role = message.get("role")
        if role == "function":
            raise invalid(f"{where}: the deprecated role 'function' is not supported: use tools", f"{where}.role")
        if not isinstance(role, str) or role not in MESSAGE_KEYS:
            raise invalid(f"{where}.role={_shown(role)} must be one of {', '.join(MESSAGE_KEYS)}", f"{where}.role")
        extra = sorted(set(message) - MESSAGE_KEYS[role])
        if extra:
            raise invalid(f"{where}: unknown key {extra[0]!r} for a {role} message", f"{where}.{extra[0]}")
        for key in ("audio", "function_call"):
            if message.get(key) is not None:
                raise invalid(f"{where}.{key} is not supported (text and tool_calls only)", f"{where}.{key}")
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise invalid(f"{where}.name must be a string", f"{where}.name")
        text = _content(message.get("content"), f"{where}.content", role)
        if role in ("system", "developer"):
            if text:
                system.append(text)
            continue
        entry: dict[str, Any] = {"role": role, "content": text}
        if name:
            entry["name"] = name
        if role == "assistant":
            refusal = message.get("refusal")
            if refusal is not None and not isinstance(refusal, str):
                raise invalid(f"{where}.refusal must be a string", f"{where}.refusal")
            if refusal:
                entry["content"] = f"{text}\n{refusal}" if text else refusal
            calls = _message_tool_calls(message.get("tool_calls"), f"{where}.tool_calls")
            if calls:
                entry["tool_calls"] = calls
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise invalid(
                    f"{where}.tool_call_id must be the id of the tool call it answers", f"{where}.tool_call_id"
                )
            entry["tool_call_id"] = call_id
        if role == "user":
            last_user = i
        entries.append(entry)
    if last_user is None:
        raise invalid("messages must hold at least one user message (the RLM answers the last one)", "messages")
    question = next(entry["content"] for entry in reversed(entries) if entry["role"] == "user")
    if not question or question.isspace():
        # Refused here, as a bad request: a run would only find out after its first model call, as a 500.
        where = f"messages[{last_user}].content"
        raise invalid(
            f"{where} is empty ({len(question)} characters of whitespace): the RLM answers the last user message; "
            "give it the question, or the text to reason over",
            where,
        )
    return ("\n\n".join(system) or None), entries


def _content(content: Any, where: str, role: str) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        if role in ("assistant",):
            return ""
        raise invalid(f"{where} is missing: a {role} message needs content", where)
    if not isinstance(content, list):
        raise invalid(f"{where} must be a string or an array of content parts, got {_kind(content)}", where)
    texts: list[str] = []
    for j, part in enumerate(content):
        here = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise invalid(f"{here} must be a content part object", here)
        kind = part.get("type")
        if kind == "refusal" and role == "assistant" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
            continue
        if kind != "text":
            raise invalid(
                f"{here} is a {_shown(kind)} part: this server reads text only (send images, audio and files as "
                "text, or use a multimodal model directly)",
                here,
            )
        if set(part) - {"type", "text"} or not isinstance(part.get("text"), str):
            raise invalid(f"{here} must be {{'type': 'text', 'text': '...'}}", here)
        texts.append(part["text"])
    return "".join(texts)


def _message_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise invalid(f"{where} must be an array", where)
    out: list[dict[str, Any]] = []
    for k, call in enumerate(calls):
        here = f"{where}[{k}]"
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or call.get("type", "function") != "function"
            or not isinstance(call.get("id"), str)
            or not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments", ""), str)
        ):
            raise invalid(
                f"{here} must be {{'id': ..., 'type': 'function', "
                "'function': {'name': ..., 'arguments': '{...}'}}",
                here,
            )
        arguments = function.get("arguments") or "{}"
        try:
            args: Any = json.loads(arguments)
        except (ValueError, RecursionError):
            args = arguments  # the model's own text, as it sent it
        out.append({"id": call["id"], "name": function["name"], "args": args})
    return out


def _optional_bool(data: Mapping[str, Any], name: str) -> bool | None:
    value = data.get(name)
    if value is not None and not isinstance(value, bool):
        raise invalid(f"{name}={_shown(value)} must be true or false", name)
    return value


def _stream_options(options: Any, stream: bool) -> bool:
    if options is None:
        return False
    if not stream:
        raise invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
    if not isinstance(options, dict):
        raise invalid("stream_options must be an object", "stream_options")
    extra = sorted(set(options) - {"include_usage", "include_obfuscation"})
    if extra:
        raise invalid(
            f"Unrecognized request argument supplied: stream_options.{extra[0]}", f"stream_options.{extra[0]}"
        )
    if options.get("include_obfuscation") not in (None, False):
        raise invalid(
            "stream_options.include_obfuscation=true is not supported: this server adds no obfuscation padding "
            "(send false or leave it out)",
            "stream_options.include_obfuscation",
        )
    usage = options.get("include_usage")
    if usage is not None and not isinstance(usage, bool):
        raise invalid("stream_options.include_usage must be true or false", "stream_options.include_usage")
    return bool(usage)


def _number(data: Mapping[str, Any], name: str) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    # A JSON number past floats is a float inf (1e400) or a huge int (10**400, which math.isfinite cannot take).
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise invalid(f"{name}={_shown(value)} must be a finite number", name)
    return value


def _sampling(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (low, high) in SAMPLING_RANGES.items():
        value = _number(data, name)
        if value is None:
            continue
        if not low <= value <= high:
            raise invalid(f"{name}={value!r} must be between {low:g} and {high:g}", name, "decimal_above_max_value")
        out[name] = value
    for name, choices in SAMPLING_CHOICES.items():
        value = data.get(name)
        if value is None:
            continue
        if value not in choices:
            raise invalid(f"{name}={_shown(value)} must be one of {', '.join(choices)}", name)
        out[name] = value
    seed = data.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63:
            raise invalid(f"seed={_shown(seed)} must be a 64-bit integer", "seed")
        out["seed"] = seed
    return out


def _max_tokens(data: Mapping[str, Any]) -> int | None:
    given = {name: data.get(name) for name in ("max_completion_tokens", "max_tokens") if data.get(name) is not None}
    for name, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
            raise invalid(f"{name}={_shown(value)} must be an integer of at least 1", name)
    if len(set(given.values())) > 1:
        raise invalid(
            "give max_completion_tokens or max_tokens (the deprecated name), not both with different values",
            "max_tokens",
        )
    return next(iter(given.values()), None)


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or len(items) > MAX_STOP or not all(isinstance(s, str) for s in items):
        raise invalid(f"stop must be a string or an array of at most {MAX_STOP} strings", "stop")
    return tuple(s for s in items if s)


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid("tools must be an array of tools", "tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else _kind(tool)
            raise invalid(f"{where} is a {_shown(kind)} tool: only function tools are supported", f"{where}.type")
        extra = sorted(set(tool) - {"type", "function"})
        function = tool.get("function")
        if extra or not isinstance(function, dict):
            raise invalid(f"{where} must be {{'type': 'function', 'function': {{...}}}}", where)
        unknown = sorted(set(function) - {"name", "description", "parameters", "strict"})
        if unknown:
            raise invalid(f"{where}.function: unknown key {unknown[0]!r}", f"{where}.function.{unknown[0]}")
        if not isinstance(function.get("name"), str):
            raise invalid(f"{where}.function.name must be a string", f"{where}.function.name")
        out.append({"type": "function", "function": {k: v for k, v in function.items() if k != "strict"}})
    return out or None


def _tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> str | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in ("auto", "required", "none"):
            raise invalid(
                f"tool_choice={choice!r} must be 'auto', 'required', 'none' or a named function", "tool_choice"
            )
        name = choice
    elif (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("function"), dict)
        and isinstance(choice["function"].get("name"), str)
    ):
        name = choice["function"]["name"]
        if not tools or all(t["function"]["name"] != name for t in tools):
            raise invalid(f"tool_choice names the function {name!r}, which tools does not hold", "tool_choice")
    else:
        raise invalid(
            f"tool_choice={_shown(choice)} must be 'auto', 'required', 'none' or "
            "{'type': 'function', 'function': {'name': ...}} (allowed_tools and custom tools are not supported)",
            "tool_choice",
        )
    if name in ("required",) and not tools:
        raise invalid("tool_choice='required' needs tools", "tool_choice")
    return name


def _response_format(fmt: Any) -> dict[str, Any] | None:
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text" and set(fmt) == {"type"}:
        return None
    if kind == "json_object" and set(fmt) == {"type"}:
        return {"type": "object"}
    if kind == "json_schema" and set(fmt) <= {"type", "json_schema"}:
        spec = fmt.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise invalid(
                "response_format.json_schema must be {'name': ..., 'schema': {...}}", "response_format.json_schema"
            )
        unknown = sorted(set(spec) - {"name", "schema", "strict", "description"})
        if unknown:
            raise invalid(
                f"response_format.json_schema: unknown key {unknown[0]!r}", f"response_format.json_schema.{unknown[0]}"
            )
        schema = spec.get("schema", {"type": "object"})
        if not isinstance(schema, dict):
            raise invalid(
                "response_format.json_schema.schema must be a JSON schema object", "response_format.json_schema.schema"
            )
        return {"title": spec["name"], **schema} if "title" not in schema else dict(schema)
    raise invalid(
        f"response_format={_shown(fmt)} must be {{'type': 'text'}}, {{'type': 'json_object'}} or "
        "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}",
        "response_format",
    )


def _labels(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in LABELS:
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or len(value) > MAX_LABEL_CHARS:
            raise invalid(f"{name} must be a string of at most {MAX_LABEL_CHARS} characters", name)
        out[name] = value
    metadata = data.get("metadata")
    if metadata is not None:
        if (
            not isinstance(metadata, dict)
            or len(metadata) > 16
            or not all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512
                       for k, v in metadata.items())
        ):  # fmt: skip
            raise invalid("metadata must map at most 16 keys (64 characters) to strings (512 characters)", "metadata")
        out["metadata"] = metadata
    return out


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):  # nested as deep as the parser allows: named, not shown
        text = f"{_kind(value)} nested too deeply to show"
    return text if len(text) <= 80 else f"{text[:77]}..."


__all__ = ["ChatRequest", "OpenAIError", "conversation_entries", "conversation_of", "parse_request"]
