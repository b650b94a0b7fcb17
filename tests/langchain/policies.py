"""Root policies that play an RLM's root model for the LangChain tests (like pydantic-ai's FunctionModel)."""

from __future__ import annotations

import json
import re
from typing import Any

from rlm_adapters.testing import turn_of

_SCHEMA = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


def example_value(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """A value matching a JSON schema, like pydantic-ai's TestModel answers from the schema."""
    root = root or schema
    if "$ref" in schema:
        return example_value(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        return example_value(options[0], root)
    kind = schema.get("type")
    if kind == "object":
        return {key: example_value(sub, root) for key, sub in schema.get("properties", {}).items()}
    return {"string": "cats", "integer": 1, "number": 1.5, "boolean": True, "array": []}.get(str(kind), "cats")


def schema_in(system_prompt: str) -> dict[str, Any] | None:
    """The JSON schema ChatRLM put into the root model's instructions, if any."""
    match = _SCHEMA.search(system_prompt)
    return json.loads(match.group(1)) if match else None


def standard_root(messages: list[dict[str, Any]]) -> str:
    """A root model for the standard suites: looks at `context`, asks a sub-model, then answers.

    With a schema in its instructions it builds a matching value and finishes with FINAL_VAR.
    """
    schema = schema_in(str(messages[0]["content"]))
    if schema is not None:
        return f'```repl\nanswer = {example_value(schema)!r}\nFINAL_VAR("answer")\n```'
    if turn_of(messages) == 0:
        code = "print(type(context), len(context))\nnote = llm_query('Say hi: ' + str(context)[-500:])"
        return f"```repl\n{code}\n```"
    return "FINAL(Hello from the RLM! Cats nap in sunlight; two haikus would follow here.)"
