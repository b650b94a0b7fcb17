"""A JSON Schema checker for answers: the keywords that Pydantic, TypedDicts and hand-written schemas use.

`check_schema` refuses, before a run starts, a schema this module cannot enforce in full (an unknown
validation keyword, a ``$ref`` that leads nowhere, a wrong type for a keyword), so that no keyword is ever
silently ignored; annotations (``title``, ``description``, ``default``, ``format``, ...) are accepted and
have no effect, as the 2020-12 specification says of them. `problems` lists what is wrong with a value.

Values come from model code and schemas from callers (an MCP client's ``output_schema``): both are bounded.
A schema is refused when its ``$ref``s expand past what a check can afford (`core.schema_cost.check_cost`:
a 31-node schema can mean 2**30 checks), and a check stops after `MAX_CHECK_STEPS` subschemas applied,
with a problem that says so; problems listed are capped too. ``pattern`` and
``patternProperties`` are matched by RE2 (`linear_pattern`), in time linear in the value: a backtracking
engine lets a caller's ``^(a+)+$`` and a value chosen by model code hold a thread for hours. A pattern RE2
cannot run (backreferences, lookaround) is refused before the run starts.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import Any

from rlm_adapters.core.schema_cost import (
    MAX_CHECK_STEPS,
    MAX_HOPS,
    MAX_SCHEMA_NODES,
    Steps,
    StepsExceeded,
    check_cost,
    resolve_pointer,
)
from rlm_adapters.errors import ConfigurationError

# Keywords that say nothing about validity (JSON Schema 2020-12 annotations, and Pydantic's OpenAPI extras).
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$schema", "$id", "$comment", "format", "deprecated",
     "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "discriminator", "nullable"}
)  # fmt: skip
SCHEMA_KEYWORDS = frozenset(
    {"properties", "patternProperties", "additionalProperties", "propertyNames", "items", "not", "$defs",
     "definitions"}
)  # fmt: skip
LIST_KEYWORDS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
CHECKS = frozenset(
    {"$ref", "type", "enum", "const", "required", "minProperties", "maxProperties", "minItems", "maxItems",
     "uniqueItems", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
     "exclusiveMaximum", "multipleOf"}
)  # fmt: skip
KNOWN = ANNOTATIONS | SCHEMA_KEYWORDS | LIST_KEYWORDS | CHECKS
TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
MAX_SCHEMA_CHARS = 200_000
MAX_PROBLEMS = 20
PATTERN_CHARS_PER_STEP = 1_000  # RE2 reads about this much text in the time of one subschema applied
_PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}


def linear_pattern(pattern: str) -> Any:
    """`pattern` compiled by RE2, which matches in time linear in the text (no backtracking).

    Args:
        pattern: A JSON schema ``pattern`` (or a ``patternProperties`` name).

    Raises:
        ValueError: RE2 cannot run it (a backreference, a lookaround, a repetition too large); the message
            names the pattern and what to do.
    """
    if not isinstance(pattern, str):
        raise ValueError(f"the pattern {pattern!r:.80} must be a string")
    return _compile(pattern)


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> Any:
    import re2  # loaded with the first schema pattern, not by every first call (issue 41: 5 ms)

    options = re2.Options()
    options.log_errors = False  # RE2 would print each refused pattern on stderr
    options.never_capture = True  # only "does it match" is asked
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        try:
            re.compile(pattern)  # compiling only, to tell a typo from what RE2 will not run
        except re.error as syntax:
            raise ValueError(f"the pattern {pattern!r:.200} is not a regular expression: {syntax}") from None
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"the pattern {pattern!r:.200} cannot be matched in linear time ({reason}); write it without "
            "backreferences, lookahead or lookbehind (RE2 syntax)"
        ) from None


def pattern_matches(pattern: str, text: str) -> bool:
    """Whether `pattern` (checked by `linear_pattern`) matches somewhere in `text`, in linear time."""
    # As UTF-8 bytes: a lone surrogate from model code is matched as bytes, not an encoding error.
    return linear_pattern(pattern).search(text.encode("utf-8", "surrogatepass")) is not None


def check_schema(schema: Any, where: str = "output_schema") -> dict[str, Any]:
    """`schema` when this module can enforce every keyword in it; else a `ConfigurationError` saying what.

    Args:
        schema: A JSON schema (a dict).
        where: How the schema is named in the error (the argument or flag it came from).
    """
    if not isinstance(schema, Mapping):
        raise ConfigurationError(f"{where} must be a JSON schema (a dict), got {type(schema).__name__}")
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where} is not JSON ({exc}); give a JSON schema") from None
    if size > MAX_SCHEMA_CHARS:
        raise ConfigurationError(f"{where} is {size:,} characters of JSON; the limit is {MAX_SCHEMA_CHARS:,}")
    root = dict(schema)
    for count, (path, node) in enumerate(_nodes(root, "#"), start=1):
        if count > MAX_SCHEMA_NODES:
            raise ConfigurationError(f"{where} has more than {MAX_SCHEMA_NODES:,} subschemas")
        _check_node(root, node, path, where)
    try:
        check_cost(root, applied=CHECKS | SCHEMA_KEYWORDS | LIST_KEYWORDS)
    except ValueError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    return root


def _nodes(root: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Every subschema (booleans included) with its JSON pointer, without recursion."""
    stack = [(path, root)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if not isinstance(node, Mapping):
            continue
        for key in SCHEMA_KEYWORDS & node.keys():
            value = node[key]
            if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(value, Mapping):
                stack += [(f"{path}/{key}/{name}", sub) for name, sub in value.items()]
            elif key == "items" and isinstance(value, list):  # draft 4-7 tuples
                stack += [(f"{path}/items/{i}", sub) for i, sub in enumerate(value)]
            else:
                stack.append((f"{path}/{key}", value))
        for key in LIST_KEYWORDS & node.keys():
            if isinstance(node[key], list):
                stack += [(f"{path}/{key}/{i}", sub) for i, sub in enumerate(node[key])]


def _check_node(root: dict[str, Any], node: Any, path: str, where: str) -> None:
    def bad(message: str) -> ConfigurationError:
        return ConfigurationError(f"{where} at {path!r}: {message}")

    if isinstance(node, bool):
        return
    if not isinstance(node, Mapping):
        raise bad(f"a subschema must be an object or a boolean, got {node!r:.60}")
    unknown = sorted(set(node) - KNOWN)
    if unknown:
        raise bad(f"the keyword {unknown[0]!r} is not supported here (supported: {', '.join(sorted(CHECKS))}, ...)")
    kinds = node.get("type")
    if kinds is not None:
        listed = kinds if isinstance(kinds, list) else [kinds]
        if not listed or not all(isinstance(k, str) and k in TYPES for k in listed):
            raise bad(f"type={kinds!r} must be one of {sorted(TYPES)} or a list of them")
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        if key in node and not isinstance(node[key], Mapping):
            raise bad(f"{key} must be an object")
    for key in LIST_KEYWORDS:
        if key in node and (not isinstance(node[key], list) or (key != "prefixItems" and not node[key])):
            raise bad(f"{key} must be a non-empty list of schemas")
    if "required" in node and not (
        isinstance(node["required"], list) and all(isinstance(k, str) for k in node["required"])
    ):
        raise bad("required must be a list of property names")
    if "enum" in node and not isinstance(node["enum"], list):
        raise bad("enum must be a list")
    for key in ("minProperties", "maxProperties", "minItems", "maxItems", "minLength", "maxLength"):
        value = node.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise bad(f"{key}={value!r} must be a whole number >= 0")
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        value = node.get(key)
        if value is not None and not _is_number(value):
            raise bad(f"{key}={value!r} must be a number")
    if node.get("multipleOf") is not None and not node["multipleOf"] > 0:
        raise bad("multipleOf must be > 0")
    patterns = [node["pattern"]] if "pattern" in node else []
    patterns += list(node.get("patternProperties") or {})
    for pattern in patterns:
        try:
            linear_pattern(pattern)
        except ValueError as exc:
            raise bad(str(exc)) from None
    if "$ref" in node:
        try:
            resolve_pointer(root, node["$ref"])
        except LookupError as exc:
            raise bad(str(exc)) from None


def problems(value: Any, schema: Mapping[str, Any], where: str = "value") -> list[str]:
    """What is wrong with `value` under `schema` (checked by `check_schema`), at most `MAX_PROBLEMS` lines.

    The check applies at most `MAX_CHECK_STEPS` subschemas (`core.schema_cost.Steps`): past them it stops
    with a problem saying the value is too large to check, whatever the schema and the value.

    Args:
        value: A JSON value (what ``json.loads`` gives).
        schema: The whole schema.
        where: How the value is named in the problems.
    """
    found: list[str] = []
    walk = _Walk(schema, Steps(MAX_CHECK_STEPS))
    try:
        walk.check(value, schema, where, found, 0)
    except RecursionError:
        found.append(f"{where} is nested too deeply to check")
    except StepsExceeded:
        found.append(walk.steps.problem(where))
    return found[:MAX_PROBLEMS]


def _is_number(value: Any) -> bool:
    # An int is finite however large (`math.isfinite` of 10**400 raises OverflowError).
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value)
    )


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if name == "number":
        return _is_number(value)
    return isinstance(value, _PYTHON_TYPES[name])


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: ``1 == 1.0``, but ``True != 1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def shown(value: Any, limit: int = 80) -> str:
    """`value` for a problem's line, at most `limit` characters, in time that does not grow with `value`.

    ``repr`` of a 40 MB answer is 40 MB of work for each line that quotes it, and of an int of 5,000 digits
    an error; this looks at a few items of each container and the first characters of each text.
    """
    text = _preview(value, 2, limit)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _preview(value: Any, depth: int, limit: int) -> str:
    if isinstance(value, str):
        head = str.__getitem__(value, slice(0, limit))  # a plain str, whatever subclass `value` is
        return repr(head) if len(value) <= limit else f"{repr(head)[:-1]}...{repr(head)[-1]}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 3_000:  # about 900 digits: past them, writing it out is slow, then refused
            return f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
        return int.__repr__(value)
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, list | tuple | dict):
        if depth == 0:
            return "[...]" if not isinstance(value, dict) else "{...}"
        pairs = itertools.islice(value.items() if isinstance(value, dict) else enumerate(value), 4)
        inner = [
            f"{_preview(key, 0, 20)}: {_preview(item, depth - 1, limit)}" if isinstance(value, dict)
            else _preview(item, depth - 1, limit)
            for key, item in pairs
        ]  # fmt: skip
        more = ", ..." if len(value) > 4 else ""
        return ("{%s}" if isinstance(value, dict) else "[%s]") % (", ".join(inner) + more)
    return f"<{type(value).__name__}>"


class _Walk:
    """One check of one value: the whole schema (for $refs) and the steps it may still take."""

    def __init__(self, root: Mapping[str, Any], steps: Steps) -> None:
        self.root = root
        self.steps = steps

    def check(self, value: Any, schema: Any, where: str, out: list[str], hops: int) -> None:
        if len(out) >= MAX_PROBLEMS:
            return
        self.steps.take()
        if schema is True:
            return
        if schema is False:
            out.append(f"{where} is not allowed here")
            return
        if hops > MAX_HOPS:
            out.append(f"{where}: the schema refers to itself without reaching a check")
            return
        if "$ref" in schema:
            self.check(value, resolve_pointer(self.root, schema["$ref"]), where, out, hops + 1)
        for option_key in ("anyOf", "oneOf"):
            if option_key in schema:
                matching = sum(not self._sub(value, option, where, hops + 1) for option in schema[option_key])
                if matching == 0:
                    out.append(f"{where}={shown(value)} matches none of the allowed types")
                elif option_key == "oneOf" and matching > 1:
                    out.append(f"{where}={shown(value)} matches more than one of the allowed types (oneOf)")
        for sub in schema.get("allOf", []):
            self.check(value, sub, where, out, hops + 1)
        if "not" in schema and not self._sub(value, schema["not"], where, hops + 1):
            out.append(f"{where}={shown(value)} matches a schema it must not match")
        if "const" in schema and not _equal(value, schema["const"]):
            out.append(f"{where}={shown(value)} must be {shown(schema['const'])}")
        if "enum" in schema:
            self.steps.take(len(schema["enum"]))
            if not any(_equal(value, option) for option in schema["enum"]):
                out.append(f"{where}={shown(value)} is not one of {shown(schema['enum'], 200)}")
        kinds = schema.get("type")
        if kinds is not None:
            listed = kinds if isinstance(kinds, list) else [kinds]
            if not any(_is_type(value, kind) for kind in listed):
                out.append(f"{where} should be {' or '.join(listed)}, got {type(value).__name__} {shown(value)}")
                return
        if isinstance(value, str):
            self._string(value, schema, where, out)
        elif _is_number(value):
            _check_number(value, schema, where, out)
        elif isinstance(value, dict):
            self._object(value, schema, where, out)
        elif isinstance(value, list):
            self._array(value, schema, where, out)

    def _sub(self, value: Any, schema: Any, where: str, hops: int) -> list[str]:
        found: list[str] = []
        self.check(value, schema, where, found, hops)
        return found

    def _string(self, value: str, schema: Mapping[str, Any], where: str, out: list[str]) -> None:
        length = len(value)
        if "minLength" in schema and length < schema["minLength"]:
            out.append(f"{where} has {length} characters; at least {schema['minLength']} are needed")
        if "maxLength" in schema and length > schema["maxLength"]:
            out.append(f"{where} has {length} characters; at most {schema['maxLength']} are allowed")
        if "pattern" in schema:
            self.steps.take(1 + length // PATTERN_CHARS_PER_STEP)  # RE2 is linear, but a 40 MB text is 40 MB
            if not pattern_matches(schema["pattern"], value):
                out.append(f"{where}={shown(value)} does not match the pattern {shown(schema['pattern'], 200)}")

    def _object(self, value: dict[str, Any], schema: Mapping[str, Any], where: str, out: list[str]) -> None:
        required = schema.get("required", [])
        self.steps.take(len(required))
        out += [f"{where} is missing the required key {shown(k)}" for k in required if k not in value]
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            out.append(f"{where} has {len(value)} keys; at least {schema['minProperties']} are needed")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            out.append(f"{where} has {len(value)} keys; at most {schema['maxProperties']} are allowed")
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties", True)
        names = schema.get("propertyNames")
        for key, item in value.items():
            if len(out) >= MAX_PROBLEMS:
                return
            at = f"{where}[{shown(key)}]"
            if names is not None:
                self.check(key, names, f"the key {shown(key)} of {where}", out, 0)
            matched = False
            if key in properties:
                matched = True
                self.check(item, properties[key], at, out, 0)
            for pattern, sub in patterns.items():
                self.steps.take(1 + len(key) // PATTERN_CHARS_PER_STEP)
                if pattern_matches(pattern, key):
                    matched = True
                    self.check(item, sub, at, out, 0)
            if not matched:
                if extra is False:
                    out.append(f"{where} has the key {shown(key)}, which the schema does not allow")
                elif isinstance(extra, Mapping):
                    self.check(item, extra, at, out, 0)

    def _array(self, value: list[Any], schema: Mapping[str, Any], where: str, out: list[str]) -> None:
        if "minItems" in schema and len(value) < schema["minItems"]:
            out.append(f"{where} has {len(value)} items; at least {schema['minItems']} are needed")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append(f"{where} has {len(value)} items; at most {schema['maxItems']} are allowed")
        if schema.get("uniqueItems"):
            self.steps.take(len(value))
            repeated = repeated_item(value)
            if repeated is not None:
                out.append(f"{where} repeats the item {shown(repeated)}; its items must be unique")
        items = schema.get("items")
        prefix = schema.get("prefixItems", items if isinstance(items, list) else [])
        rest = None if isinstance(items, list) else items
        for index, item in enumerate(value):
            if len(out) >= MAX_PROBLEMS:
                return
            at = f"{where}[{index}]"
            if index < len(prefix):
                self.check(item, prefix[index], at, out, 0)
            elif rest is not None:
                self.check(item, rest, at, out, 0)


def repeated_item(items: list[Any]) -> Any:
    """The first item of `items` equal (as JSON: ``1 == 1.0``, ``True != 1``) to an earlier one, else None.

    One pass over canonical JSON texts: comparing each pair, as `jsonschema` does for items that cannot be
    sorted, is 10**10 comparisons for 100,000 objects.
    """
    seen: set[str] = set()
    for item in items:
        try:
            key = json.dumps(_canonical(item), sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            key = f"{type(item).__name__}:{id(item)}"  # not JSON data: equal to nothing else
        if key in seen:
            return item
        seen.add(key)
    return None


def _canonical(value: Any) -> Any:
    # 1 and 1.0 are one JSON number; an integral float is written as the int it equals.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    return value


def _check_number(value: float, schema: Mapping[str, Any], where: str, out: list[str]) -> None:
    checks = (
        ("minimum", ">=", schema.get("minimum") is not None and value < schema["minimum"]),
        ("maximum", "<=", schema.get("maximum") is not None and value > schema["maximum"]),
        ("exclusiveMinimum", ">", schema.get("exclusiveMinimum") is not None and value <= schema["exclusiveMinimum"]),
        ("exclusiveMaximum", "<", schema.get("exclusiveMaximum") is not None and value >= schema["exclusiveMaximum"]),
    )
    out += [f"{where}={shown(value)} must be {sign} {schema[key]!r}" for key, sign, broken in checks if broken]
    step = schema.get("multipleOf")
    if step is not None and not _is_multiple(value, step):
        out.append(f"{where}={shown(value)} must be a multiple of {step!r}")


def _is_multiple(value: float, step: float) -> bool:
    if isinstance(value, int) and isinstance(step, int):
        return value % step == 0
    try:
        quotient = value / step
    except OverflowError:  # an int beyond floats: exactly, as fractions
        return Fraction(value) % Fraction(step) == 0
    return math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9)
