"""Tools the caller runs: what they are, how the root model must call them, and the check of each call.

These are not `custom_tools` (host functions that run inside a turn and hand a value back to model code).
They belong to whoever called the RLM, usually an agent framework: the root model ends its turn by calling
them (`call_tool(name, **args)` in a cell, or a ``CALL_TOOL name {...}`` line in its reply, see
`core/engine/tool_turn.py`), each call is checked here against the tool's JSON schema, and the run ends with
``finish_reason="tool_calls"`` and the calls in `RLMResult.tool_calls`. The caller runs them and sends the
results back in its next call's context.

JSON schemas are checked with `jsonschema` (the ``tools`` extra; the ``langchain``, ``llama-index`` and
``mcp`` extras bring it too), loaded only when tools are offered, its regular expressions matched by RE2
(`linear_validator`, below): the arguments come from model code. A tool's schema is refused when checking a
value against it could run away (`core.schema_cost.check_cost`: ``$ref``s that fan out or loop, nesting past
what arguments may have), before `jsonschema` itself reads it; each check of arguments stops after
`MAX_CHECK_STEPS` subschemas applied.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rlm_adapters._extras import require
from rlm_adapters.core.json_schema import PATTERN_CHARS_PER_STEP, linear_pattern, pattern_matches, repeated_item, shown

# What a result carries is defined with it (core/result.py); named here too, beside the tools they call.
from rlm_adapters.core.result import InvalidToolCall as InvalidToolCall
from rlm_adapters.core.result import ToolCall as ToolCall
from rlm_adapters.core.schema_cost import MAX_CHECK_STEPS, MAX_SCHEMA_DEPTH, MAX_SCHEMA_NODES, Steps, StepsExceeded
from rlm_adapters.core.schema_cost import check_cost as check_cost
from rlm_adapters.errors import ConfigurationError, ToolSchemaError

# What the model may ask of one call and one turn, checked on the host before any schema work.
MAX_TOOL_NAME_CHARS = 200
MAX_ARGS_CHARS = 1_000_000  # the worker refuses bigger arguments itself (its MAX_TOOL_ARGS_CHARS)
MAX_TURN_ARGS_CHARS = 8_000_000
MAX_CALLS_PER_TURN = 64
MAX_ARGS_DEPTH = MAX_SCHEMA_DEPTH  # a schema describes no deeper values than arguments may have
MAX_PROBLEMS_SHOWN = 5
MAX_PROBLEMS_READ = 100  # errors taken from jsonschema before the first few are sorted and shown
PROBLEM_CHARS = 300

ToolChoiceMode = Literal["auto", "required", "none"]


@dataclass(frozen=True)
class ToolDefinition:
    """A tool the root model may call to end its turn (the caller runs it).

    Attributes:
        name: The tool's name (what `call_tool` takes).
        description: What it does, for the root model.
        parameters: The JSON schema of its arguments (an object schema).
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    @classmethod
    def of(cls, spec: Any) -> ToolDefinition:
        """A definition from itself, an OpenAI tool (``{"type": "function", "function": {...}}``) or a function
        dict (``{"name", "description", "parameters"}``).

        Raises:
            ConfigurationError: `spec` is none of those.
        """
        if isinstance(spec, ToolDefinition):
            return spec
        if not isinstance(spec, Mapping):
            raise ConfigurationError(
                f"tools: {_shown(spec)} is not a tool; give a ToolDefinition or an OpenAI-style tool dict "
                '({"type": "function", "function": {"name": ..., "parameters": {...}}})'
            )
        function = spec.get("function") if spec.get("type") == "function" else spec
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ConfigurationError(f"tools: {_shown(spec)} has no tool name (a 'name' string)")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, Mapping):
            raise ConfigurationError(f"tools: the parameters of {function['name']!r} must be a JSON schema (a dict)")
        description = function.get("description")
        return cls(str(function["name"]), str(description or ""), dict(parameters))


@dataclass(frozen=True)
class ToolOffer:
    """The caller's tools for one run, how they must be used, and a checker per tool.

    Build it with `offer_tools`, which checks everything once.

    Attributes:
        tools: The definitions by name, in the caller's order.
        choice: ``auto`` (call or answer), ``required`` (the turn must end with a call), ``none`` (no calls)
            or a tool's name (the turn must end with calls of that tool).
        parallel: More than one call per turn is allowed.
    """

    tools: dict[str, ToolDefinition]
    choice: str
    parallel: bool = True
    _validators: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def mode(self) -> ToolChoiceMode:
        """``auto``, ``none``, or ``required`` (a named choice requires a call too)."""
        if self.choice in ("auto", "none"):
            return "auto" if self.choice == "auto" else "none"
        return "required"

    @property
    def forced_tool(self) -> str | None:
        """The tool a named choice asks for (None otherwise)."""
        return None if self.choice in ("auto", "required", "none") else self.choice

    def problems(self, name: str, args: dict[str, Any]) -> list[str]:
        """What is wrong with ``name(**args)`` under the offer (empty when nothing is)."""
        if name not in self.tools:
            return [f"there is no tool named {name[:80]!r}; the tools are {sorted(self.tools)}"]
        forced = self.forced_tool
        if forced is not None and name != forced:
            return [f"only {forced!r} may be called this turn (tool_choice={forced!r}), not {name!r}"]
        steps = Steps(MAX_CHECK_STEPS)
        _STEPS.current = steps
        try:
            errors = list(itertools.islice(self._validators[name].iter_errors(_quiet(args)), MAX_PROBLEMS_READ))
        except RecursionError:
            return ["the arguments nest too deeply to be checked"]
        except StepsExceeded:
            return [steps.problem("the arguments")]
        finally:
            _STEPS.current = None
        errors.sort(key=lambda e: [str(p) for p in e.absolute_path])
        return [_schema_problem(error) for error in errors[:MAX_PROBLEMS_SHOWN]]


def offer_tools(
    tools: Sequence[Any] | None, tool_choice: Any = None, parallel_tool_calls: bool = True
) -> ToolOffer | None:
    """Check the caller's tools once, before a run starts.

    Args:
        tools: `ToolDefinition`s or OpenAI-style tool dicts (None or empty: no tools, and no offer).
        tool_choice: ``None`` / ``"auto"``, ``"required"`` (``"any"`` is the same), ``"none"``, or a tool's name.
        parallel_tool_calls: Allow more than one call per turn.

    Raises:
        ConfigurationError: A bad tool, schema, name, choice or flag (the message quotes it).
        MissingExtraError: `jsonschema` is not installed.
    """
    if not tools:
        if tool_choice not in (None, "auto", "none"):
            raise ConfigurationError(f"tool_choice={tool_choice!r} needs tools: give tools=[...] too")
        return None
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ConfigurationError(f"tools must be a list of tools, got {type(tools).__name__}")
    if not isinstance(parallel_tool_calls, bool):
        raise ConfigurationError(f"parallel_tool_calls={parallel_tool_calls!r} must be True or False")
    definitions: dict[str, ToolDefinition] = {}
    for index, spec in enumerate(tools):
        definition = ToolDefinition.of(spec)
        name = definition.name
        if not name or len(name) > MAX_TOOL_NAME_CHARS or not name.isprintable():
            raise ToolSchemaError(f"tools: the tool name {name[:80]!r} must be 1-200 printable characters", index)
        if any(c.isspace() or c in "{}()" for c in name):
            raise ToolSchemaError(f"tools: the tool name {name!r} must not hold spaces, braces or parentheses", index)
        if name in definitions:
            raise ToolSchemaError(f"tools: two tools are named {name!r}", index)
        definitions[name] = definition
    choice = _choice(tool_choice, definitions)
    jsonschema = require("jsonschema", extra="tools", feature="tool calling (tools=)")
    schemas: dict[str, dict[str, Any]] = {}
    validators: dict[str, Any] = {}
    # Every tool's bounds before any tool's jsonschema check: the bounds are cheap, that check is not
    # (seconds for a 10,000-node schema), and a request with one oversized tool is refused without it.
    for step in ("bounds", "schema"):
        for index, (name, definition) in enumerate(definitions.items()):
            try:
                if step == "bounds":
                    schemas[name] = bounded_schema(jsonschema, definition.parameters)
                else:
                    validators[name] = tool_validator(jsonschema, schemas[name])
            except jsonschema.SchemaError as exc:
                raise ToolSchemaError(
                    f"tools: the parameters of {name!r} are not a valid JSON schema: {shown(exc.message, 300)}",
                    index,
                    "parameters",
                ) from None
            except ValueError as exc:
                raise ToolSchemaError(f"tools: the parameters of {name!r}: {exc}", index, "parameters") from None
    return ToolOffer(definitions, choice, parallel_tool_calls, validators)


# Keywords whose target is known only while a value is checked, or that move where a $ref points.
_DYNAMIC = frozenset({"$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "$anchor"})
# Digests of schemas jsonschema has found valid (a client sends the same tools with every request).
_VALID: dict[str, None] = {}
_VALID_LOCK = threading.Lock()
MAX_VALID_KEPT = 256


def bounded_schema(jsonschema: Any, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameters once their checks that cost little and bound every later use have passed:
    subschemas, expansion and depth (`check_cost`), and patterns RE2 can run.

    Raises:
        ValueError: A bound or a pattern refused (the message names the subschema).
    """
    schema = dict(parameters)
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    # Drafts 3 and 4 spell $id "id": a nested one would move the base of the $refs below it too.
    legacy = base in (jsonschema.Draft3Validator, jsonschema.Draft4Validator)
    check_cost(schema, frozenset(base.VALIDATORS), _DYNAMIC, {"$id", "id"} if legacy else {"$id"})
    check_patterns(schema)
    return schema


def tool_validator(jsonschema: Any, schema: dict[str, Any]) -> Any:
    """A `jsonschema` validator for a schema `bounded_schema` passed, once jsonschema finds it valid.

    Raises:
        jsonschema.SchemaError: Not a valid schema of its draft.
        ValueError: Nested too deeply for jsonschema to read.
    """
    checker = linear_validator(jsonschema, schema)
    try:
        digest: str | None = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
    except (TypeError, ValueError, RecursionError):  # not JSON (a Python caller's objects): checked each time
        digest = None
    if digest is None or digest not in _VALID:
        try:
            checker.check_schema(schema)
        except RecursionError:
            raise ValueError("the schema nests too deeply to be read") from None
        if digest is not None:
            with _VALID_LOCK:
                _VALID[digest] = None
                while len(_VALID) > MAX_VALID_KEPT:
                    del _VALID[next(iter(_VALID))]
    return checker(schema)


def _choice(tool_choice: Any, tools: Mapping[str, ToolDefinition]) -> str:
    if tool_choice is None or tool_choice == "auto":
        return "auto"
    if tool_choice in ("required", "any", "none"):
        return "none" if tool_choice == "none" else "required"
    if isinstance(tool_choice, str) and tool_choice in tools:
        return tool_choice
    raise ConfigurationError(
        f"tool_choice={tool_choice!r} must be 'auto', 'required', 'any', 'none' or one of the tools' names "
        f"{sorted(tools)}"
    )


def check_arguments(args: Any, budget: int = MAX_ARGS_CHARS) -> tuple[dict[str, Any] | None, int, str | None]:
    """Check that `args` (from model code) are a JSON object of bounded size, without unbounded work.

    Walks the value once, iteratively, and stops at the first thing wrong: a non-string key, a value that
    is not JSON data (a NaN, an object), text that is not valid Unicode, nesting deeper than
    `MAX_ARGS_DEPTH`, or more than `budget` characters of JSON.

    Returns:
        The arguments (None when they are refused), about how many characters of JSON they are, and the
        problem (None when there is none).
    """
    if args is None:
        return {}, 2, None
    if not isinstance(args, dict):
        return None, 0, f"the arguments must be a JSON object (keyword arguments), got {type(args).__name__}"
    size = 0
    stack: list[tuple[Any, int]] = [(args, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGS_DEPTH:
            return None, size, f"the arguments nest deeper than {MAX_ARGS_DEPTH} levels"
        if isinstance(value, str):
            size += len(value) + 2
            if not _is_unicode(value):
                return None, size, "the arguments hold text that is not valid Unicode (a lone surrogate)"
        elif value is None or isinstance(value, bool):
            size += 5
        elif isinstance(value, int):
            size += value.bit_length() // 3 + 2  # about its digits, without writing them out
        elif isinstance(value, float):
            if not math.isfinite(value):
                return None, size, f"the arguments hold {value!r}, which JSON cannot carry"
            size += 24
        elif isinstance(value, list):
            size += 2 + len(value)
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, dict):
            size += 2 + len(value)
            for key, item in value.items():
                if not isinstance(key, str):
                    return None, size, f"the arguments hold a key that is not a string: {_shown(key)}"
                size += len(key) + 3
                if not _is_unicode(key):
                    return None, size, "the arguments hold a key that is not valid Unicode (a lone surrogate)"
                stack.append((item, depth + 1))
        else:
            return None, size, f"the arguments hold a {type(value).__name__}, which is not JSON data"
        if size > budget:
            return None, size, f"the arguments are longer than {budget:,} characters of JSON"
    return args, size, None


def args_text(args: Any, limit: int = 2_000) -> str | None:
    """Arguments as JSON text for an `InvalidToolCall`, cut to `limit` characters (None for no arguments)."""
    if args is None:
        return None
    if isinstance(args, str):
        text = args
    else:
        try:
            text = json.dumps(args, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            text = _shown(args)
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit:,} more characters]"


def _is_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _schema_problem(error: Any) -> str:
    where = "".join(f"[{part!r}]" for part in error.absolute_path)
    message = str(error.message)
    if len(message) > PROBLEM_CHARS:
        message = f"{message[:PROBLEM_CHARS]}..."
    return f"args{where}: {message}"


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 80 else f"{text[:77]}..."


# `jsonschema` validators whose regular expressions run in linear time, for the arguments of tool calls.
#
# `jsonschema` matches ``pattern``, ``patternProperties`` (and the ``additionalProperties`` that depends on
# them) with Python's backtracking `re`: a tool's ``^(a+)+$`` and arguments chosen by model code would hold a
# thread for hours. `linear_validator` is the schema's own draft with those keywords matched by RE2 (see
# `core.json_schema.linear_pattern`); `check_patterns` refuses, before a run, a pattern RE2 cannot run and
# ``unevaluatedProperties`` beside ``patternProperties`` (whose bookkeeping jsonschema keeps to itself, with `re`).

# Values that are data, not subschemas: a "pattern" key inside them is not a keyword.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
MAX_NODES = MAX_SCHEMA_NODES
# Keywords that apply subschemas at the same place of the value (see `check_patterns`).
_IN_PLACE = frozenset({"$ref", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas"})
# The steps left to the check running on this thread (`ToolOffer.problems`); None outside one.
_STEPS = threading.local()


def check_patterns(schema: Mapping[str, Any]) -> None:
    """Raise `ValueError` naming the first pattern of `schema` RE2 cannot run, or a keyword mix it cannot check.

    Args:
        schema: A tool's parameters schema (any draft).
    """
    pattern_properties = unevaluated = False
    for count, node in enumerate(_dicts(schema), start=1):
        if count > MAX_NODES:
            raise ValueError(f"the schema has more than {MAX_NODES:,} subschemas")
        if isinstance(node.get("pattern"), str):
            linear_pattern(node["pattern"])
        if isinstance(node.get("patternProperties"), Mapping):
            pattern_properties = True
            for pattern in node["patternProperties"]:
                linear_pattern(pattern)
        unevaluated = unevaluated or "unevaluatedProperties" in node
        beside = sorted(_IN_PLACE & node.keys())
        if beside and ("unevaluatedProperties" in node or "unevaluatedItems" in node):
            # jsonschema works out what was evaluated by checking the value again against each of them,
            # and again for each one nested: work that no count of subschemas bounds.
            raise ValueError(
                f"unevaluatedProperties / unevaluatedItems beside {beside[0]} cannot be checked in bounded time; "
                "use additionalProperties / items, or list the properties in one schema"
            )
    if pattern_properties and unevaluated:
        raise ValueError(
            "patternProperties together with unevaluatedProperties cannot be checked in linear time; "
            "use additionalProperties instead of unevaluatedProperties"
        )


def _dicts(schema: Any) -> Iterator[Mapping[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            yield node
            stack += [value for key, value in node.items() if key not in _DATA_KEYWORDS]
        elif isinstance(node, list):
            stack += node


def linear_validator(jsonschema: Any, schema: Mapping[str, Any]) -> Any:
    """The validator class of `schema`'s draft (2020-12 by default), with RE2 for its pattern keywords.

    Args:
        jsonschema: The `jsonschema` module (an optional dependency, loaded by the caller).
        schema: The schema the class will check against.
    """
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.ValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not pattern_matches(patrn, instance):
            yield error(f"{instance!r:.80} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for key, value in instance.items():
                if pattern_matches(patrn, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=patrn)

    def additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        patterns = list(schema.get("patternProperties", {}))
        extras = [
            key for key in instance if key not in properties and not any(pattern_matches(p, key) for p in patterns)
        ]
        if validator.is_type(extra, "object"):
            for key in extras:
                yield from validator.descend(instance[key], extra, path=key)
        elif extra is False and extras:
            shown = sorted(extras, key=str)[:10]
            verb = "was" if len(shown) == 1 else "were"  # jsonschema's own wording
            yield error(f"Additional properties are not allowed ({', '.join(map(repr, shown))} {verb} unexpected)")

    def unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[Any]:
        # jsonschema compares every pair of items that cannot be sorted (objects): 10**10 for 100,000.
        if unique and validator.is_type(instance, "array"):
            repeated = repeated_item(instance)
            if repeated is not None:
                yield error(f"{shown(instance)} has non-unique elements (such as {shown(repeated)})")

    replaced = {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
        "uniqueItems": unique_items,
    }
    keywords = {name: replaced.get(name, check) for name, check in base.VALIDATORS.items()}
    return jsonschema.validators.extend(base, {name: _counted(name, check) for name, check in keywords.items()})


def _counted(name: str, check: Any) -> Any:
    """`check` (one keyword of a validator), taking its steps from the check running on this thread."""

    def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        steps: Steps | None = getattr(_STEPS, "current", None)
        if steps is not None:
            steps.take(_cost(name, value, instance, schema))
        return check(validator, value, instance, schema)

    return keyword


def _cost(name: str, value: Any, instance: Any, schema: Any) -> int:
    """Steps of one keyword: one, or as many as the work it does that grows (options, text, items, keys
    times patterns)."""
    if name == "enum" and isinstance(value, list):
        return 1 + len(value)
    if name in ("pattern", "format") and isinstance(instance, str):
        return 1 + len(instance) // PATTERN_CHARS_PER_STEP
    if name in ("patternProperties", "additionalProperties") and isinstance(instance, dict):
        patterns = schema.get("patternProperties") if isinstance(schema, Mapping) else None
        return 1 + len(instance) * (1 + (len(patterns) if isinstance(patterns, Mapping) else 0))
    if name in ("uniqueItems", "required") and isinstance(instance, list | dict):
        return 1 + len(instance) + (len(value) if isinstance(value, list) else 0)
    return 1


class _Text(str):
    """An argument's text whose ``repr`` is short (jsonschema writes ``repr(instance)`` into each error)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return shown(self)


class _Object(dict[str, Any]):
    def __repr__(self) -> str:
        return shown(self)


class _Array(list[Any]):
    def __repr__(self) -> str:
        return shown(self)


class _Int(int):
    def __repr__(self) -> str:
        return shown(self)


def _quiet(value: Any) -> Any:
    """`value` (arguments that passed `check_arguments`: at most `MAX_ARGS_DEPTH` deep) with containers, texts
    and ints whose ``repr`` is bounded, so that an error about a 1 MB text costs a line, not a megabyte."""
    if isinstance(value, str):
        return _Text(value)
    if isinstance(value, bool) or not isinstance(value, int | dict | list):
        return value
    if isinstance(value, int):
        return _Int(value)
    if isinstance(value, dict):
        return _Object((_Text(key), _quiet(item)) for key, item in value.items())
    return _Array(_quiet(item) for item in value)
