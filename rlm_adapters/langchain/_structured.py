"""Structured output: the schema the root model is told about, the check of its final value, the parser."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema
from langchain_core.utils.pydantic import is_basemodel_subclass

from rlm_adapters.core.sandbox.base import FinalAnswer


def schema_problems(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str = "value") -> list[str]:
    """What is wrong with `value` under a JSON schema (the subset pydantic and TypedDicts produce).

    Args:
        value: The value to check.
        schema: The (sub)schema `value` must match.
        root: The whole schema, where ``$ref`` names are looked up.
        where: How `value` is named in the problems.

    Returns:
        One line per problem; empty when `value` matches.
    """
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        schema = {
            **root.get("$defs", root.get("definitions", {})).get(name, {}),
            **{k: v for k, v in schema.items() if k != "$ref"},
        }
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        if any(not schema_problems(value, option, root, where) for option in options):
            return []
        return [f"{where}={value!r:.80} matches none of the allowed types"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}={value!r:.80} is not one of {schema['enum']!r}"]
    expected = schema.get("type")
    types = expected if isinstance(expected, list) else [expected] if expected else []
    if types and not any(_is_type(value, t) for t in types):
        return [f"{where} should be {' or '.join(types)}, got {type(value).__name__} {value!r:.80}"]
    problems: list[str] = []
    if isinstance(value, dict):
        problems += [f"{where} is missing the required key {k!r}" for k in schema.get("required", []) if k not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problems += schema_problems(value[key], sub, root, f"{where}[{key!r}]")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problems += schema_problems(item, schema["items"], root, f"{where}[{index}]")
    return problems


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kinds = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}
    return isinstance(value, kinds.get(name, object))


def structured_instructions(schema: Mapping[str, Any]) -> str:
    """What the root model is told when the answer must match `schema`.

    Args:
        schema: The JSON schema of the answer.
    """
    return (
        "The final answer must be a JSON value matching this JSON schema:\n```json\n"
        f"{json.dumps(schema, indent=1)}\n```\nBuild it in the REPL as a Python value (for example "
        '`answer = {...}` with exactly the schema\'s keys), then finish with `FINAL_VAR("answer")`. Do not '
        "finish with prose."
    )


def final_validator(schema: Mapping[str, Any]) -> Callable[[FinalAnswer], str | None]:
    """A `final_validator` for the engine: None when the final value matches `schema`, else the problem.

    Args:
        schema: The JSON schema of the answer.
    """

    def check(final: FinalAnswer) -> str | None:
        value = final.value
        if value is None:
            try:
                value = json.loads(final.text)
            except ValueError:
                return "the answer is not a JSON value: build it as a Python dict or list and use FINAL_VAR"
        problems = schema_problems(value, schema, schema)
        return "; ".join(problems[:5]) or None

    return check


def structured_output(
    llm: BaseChatModel, schema: dict[str, Any] | type, *, include_raw: bool = False, **kwargs: Any
) -> Runnable[LanguageModelInput, Any]:
    """`llm` answering with a value matching `schema`: the body of `ChatRLM.with_structured_output`.

    Args:
        llm: The chat model; it is bound to ``rlm_output_schema``, which its runs honour.
        schema: The output schema (a pydantic model, a TypedDict or a JSON schema).
        include_raw: Return ``{"raw", "parsed", "parsing_error"}`` instead of the parsed value.
        **kwargs: ``method`` / ``strict`` (ignored).

    Raises:
        ValueError: Other keyword arguments were given.
    """
    method = kwargs.pop("method", None) or "json_schema"
    kwargs.pop("strict", None)
    if kwargs:
        raise ValueError(f"with_structured_output got unsupported arguments {kwargs!r}")
    json_schema = convert_to_json_schema(schema)
    bound = llm.bind(
        ls_structured_output_format={"kwargs": {"method": method}, "schema": schema},
        rlm_output_schema=json_schema,
    )
    model_class = schema if isinstance(schema, type) and is_basemodel_subclass(schema) else None

    def parse(message: BaseMessage) -> Any:
        value = json.loads(message.text)
        if model_class is None:
            return value
        # pydantic 2 models validate with `model_validate`, the v1 shim with `parse_obj`.
        validate = getattr(model_class, "model_validate", None) or cast(Any, model_class).parse_obj
        return validate(value)

    parser = RunnableLambda(parse, name="parse_rlm_output")
    if not include_raw:
        return bound | parser
    assign = RunnablePassthrough.assign(parsed=lambda d: parse(d["raw"]), parsing_error=lambda _: None)
    fallback = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=bound) | assign.with_fallbacks([fallback], exception_key="parsing_error")
