"""`jsonschema` validators whose regular expressions run in linear time, for the arguments of tool calls.

`jsonschema` matches ``pattern``, ``patternProperties`` (and the ``additionalProperties`` that depends on
them) with Python's backtracking `re`: a tool's ``^(a+)+$`` and arguments chosen by model code would hold a
thread for hours. `linear_validator` is the schema's own draft with those keywords matched by RE2 (see
`core.json_schema.linear_pattern`); `check_patterns` refuses, before a run, a pattern RE2 cannot run and
``unevaluatedProperties`` beside ``patternProperties`` (whose bookkeeping jsonschema keeps to itself, with `re`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rlm_adapters.core.json_schema import linear_pattern, pattern_matches

# Values that are data, not subschemas: a "pattern" key inside them is not a keyword.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
MAX_NODES = 10_000


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

    replaced = {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
    }
    keywords = {name: check for name, check in replaced.items() if name in base.VALIDATORS}
    return jsonschema.validators.extend(base, keywords)
