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

    With a schema in its instructions it builds a matching value and finishes with FINAL_VAR; with tools
    it calls them when the test asks (`calling_root`).
    """
    schema = schema_in(str(messages[0]["content"]))
    calling = calling_root(messages)
    if calling is not None:
        return calling
    if schema is not None:
        return f'```repl\nanswer = {example_value(schema)!r}\nFINAL_VAR("answer")\n```'
    if turn_of(messages) == 0:
        code = "print(type(context), len(context))\nnote = llm_query('Say hi: ' + str(context)[-500:])"
        return f"```repl\n{code}\n```"
    return "FINAL(Hello from the RLM! Cats nap in sunlight; two haikus would follow here.)"


_TOOL = re.compile(r"^- `([^`]+)`: .*? Arguments \(JSON schema\): (\{.*\})$", re.MULTILINE)
_FORCED = re.compile(r"This turn must end with a call of `([^`]+)`")


def tools_in(system_prompt: str) -> dict[str, dict[str, Any]]:
    """The caller's tools ChatRLM offered the root model, with their argument schemas."""
    return {name: json.loads(schema) for name, schema in _TOOL.findall(system_prompt)}


def question_of(messages: list[dict[str, Any]]) -> str:
    """The user's last message as ChatRLM quotes it to the root model."""
    return str(messages[1]["content"]).split("It reads:\n\n", 1)[-1]


def arguments_for(schema: dict[str, Any], question: str) -> dict[str, Any]:
    """Arguments a reader of `question` would give: its numbers and its quoted or capitalised words."""
    numbers = [int(n) for n in re.findall(r"-?\d+", question)]
    quoted = re.findall(r"'([^']+)'", question)
    words = [w for w in re.findall(r"(?<=[a-z,] )([A-Z][\w-]*)", question)]
    args: dict[str, Any] = {}
    for key, sub in schema.get("properties", {}).items():
        kind = sub.get("type")
        if kind == "integer":
            args[key] = numbers.pop(0) if numbers else 1
        elif kind == "string":
            args[key] = quoted.pop(0) if quoted else words.pop() if words else "cats"
        else:
            args[key] = example_value(sub, schema)
    return args


def calling_root(messages: list[dict[str, Any]]) -> str | None:
    """What a root model given tools does on its first turn: None when it would work as without them.

    It calls the tool the question names (or the one it must call), reading the arguments from the
    question; in code as a rule, as a CALL_TOOL line for text outside ASCII. A conversation that ends with
    tool results is read in the REPL and answered from them.
    """
    system = str(messages[0]["content"])
    tools = tools_in(system)
    if not tools or turn_of(messages) > 0:
        return None
    if "tool result(s)" in str(messages[1]["content"]) and "must end with" not in system:
        return "```repl\nresult = context[-1]['content']\nFINAL('The tool answered: ' + result[:200])\n```"
    question = question_of(messages)
    forced = _FORCED.search(system)
    named = [name for name in tools if name in question or _words_of(name) & _words_of(question)]
    if forced is not None:
        name = forced.group(1)
    elif named:
        name = named[0]
    elif "must end with at least one tool call" in system or "tool" in question.lower():
        name = next(iter(tools))
    else:
        return None
    args = arguments_for(tools[name], question)
    if not question.isascii():
        return f"Calling {name}.\nCALL_TOOL {name} {json.dumps(args, ensure_ascii=False)}"
    return f"```repl\ncall_tool({name!r}, **{args!r})\n```"


def _words_of(text: str) -> set[str]:
    """The longer words of a tool's name or a question (``get_weather`` -> ``{"weather"}``)."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ")
    return {w.lower() for w in re.findall(r"[A-Za-z]{5,}", spaced)} - {"function", "using"}
