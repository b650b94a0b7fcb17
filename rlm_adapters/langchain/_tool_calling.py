"""Tool calling for `ChatRLM`: `bind_tools`, a call's tools as the engine's options, the calls as LangChain's.

The engine does the work (`rlm_adapters.core.engine.tool_calls`): the root model ends its turn with calls, each
checked against its tool's JSON schema. This module only speaks LangChain: any tool LangChain accepts
(a `BaseTool`, a function, a pydantic model, a TypedDict, a JSON or OpenAI schema) becomes an OpenAI tool
dict with `convert_to_openai_tool`, LangChain's ``tool_choice`` spellings become the engine's, and the
run's calls become ``tool_calls`` / ``invalid_tool_calls`` / ``tool_call_chunks``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, InvalidToolCall, ToolCall, ToolCallChunk
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from rlm_adapters.core import RLMResult
from rlm_adapters.core.adapter_kit import offer_tools

BIND_OPTIONS = frozenset({"parallel_tool_calls", "strict"})
ToolLike = Mapping[str, Any] | type | Callable[..., Any] | BaseTool


def bind_tools(
    llm: BaseChatModel,
    tools: Sequence[ToolLike],
    *,
    tool_choice: Mapping[str, Any] | str | bool | None = None,
    **kwargs: Any,
) -> Runnable[LanguageModelInput, AIMessage]:
    """The body of `ChatRLM.bind_tools` (see there).

    Raises:
        ValueError: A tool LangChain cannot convert, a bad JSON schema, a ``tool_choice`` naming no bound
            tool, ``strict=False``, or an unknown keyword argument.
    """
    unknown = sorted(set(kwargs) - BIND_OPTIONS)
    if unknown:
        raise ValueError(
            f"bind_tools got unsupported arguments {unknown}; ChatRLM takes tools, tool_choice, "
            "parallel_tool_calls and strict"
        )
    strict = kwargs.pop("strict", None)
    if strict not in (None, True):
        raise ValueError(
            f"bind_tools(strict={strict!r}): ChatRLM always checks a call's arguments against its tool's schema; "
            "give strict=True or leave it out"
        )
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ValueError(f"bind_tools(tools) takes a list of tools, got {type(tools).__name__}")
    formatted = last_of_each_name([_openai_tool(tool, strict=strict) for tool in tools])
    choice = engine_choice(tool_choice, [tool["function"]["name"] for tool in formatted])
    # Every schema and the choice are checked now, not at the first call.
    offer_tools(formatted, choice, kwargs.get("parallel_tool_calls", True))
    return llm.bind(tools=formatted, tool_choice=choice, **kwargs)


def engine_choice(tool_choice: Any, names: Sequence[str]) -> str | None:
    """LangChain's ``tool_choice`` spellings as the engine's (None, ``auto``, ``required``, ``none``, a name).

    ``"any"`` and ``True`` force a call (``True`` with one tool: that tool); a dict in OpenAI's
    (``{"type": "function", "function": {"name": ...}}``) or Anthropic's (``{"type": "tool", "name": ...}``,
    ``{"type": "any"}``) shape is read too.

    Raises:
        ValueError: It is none of those, or names a tool that is not bound.
    """
    choice: Any = tool_choice
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind == "function" and isinstance(choice.get("function"), Mapping):
            choice = choice["function"].get("name")
        elif kind == "tool":
            choice = choice.get("name")
        elif kind in ("auto", "any", "none", "required"):
            choice = kind
        else:
            raise ValueError(f"tool_choice={tool_choice!r} is not a tool choice LangChain spells")
    if choice is None or choice is False:
        return None
    if choice is True:
        return names[0] if len(names) == 1 else "required"
    if choice == "any":
        return "required"
    if choice in ("auto", "required", "none") or (isinstance(choice, str) and choice in names):
        return str(choice)
    raise ValueError(
        f"tool_choice={tool_choice!r} must be 'auto', 'any', 'required', 'none' or a bound tool {list(names)}"
    )


def engine_tool_options(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A chat model call's tools (``tools`` / ``tool_choice`` / ``parallel_tool_calls`` keyword arguments,
    as `bind_tools` binds them or a caller passes them) as options of `RLM.start`.

    Raises:
        ValueError: ``functions=`` (the legacy form), or a tool or choice that cannot be used.
    """
    if kwargs.get("functions") is not None:
        raise ValueError("ChatRLM takes tools through bind_tools(...) or tools=[...], not the legacy functions=")
    tools = kwargs.get("tools")
    if not tools:
        if kwargs.get("tool_choice") not in (None, "auto", "none", False):
            raise ValueError(f"tool_choice={kwargs['tool_choice']!r} was given without tools")
        return {}
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise ValueError(f"tools must be a list of tools, got {type(tools).__name__}")
    formatted = last_of_each_name([_openai_tool(tool) for tool in tools])
    names = [tool["function"]["name"] for tool in formatted]
    return {
        "tools": formatted,
        "tool_choice": engine_choice(kwargs.get("tool_choice"), names),
        "parallel_tool_calls": kwargs.get("parallel_tool_calls", True),
    }


def last_of_each_name(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One tool per name, the last given, as LangGraph's `ToolNode` runs the last tool of a name (the same
    tool is often bound twice, as a model and as its schema)."""
    by_name = {tool["function"]["name"]: tool for tool in tools}
    return list(by_name.values())


def _openai_tool(tool: Any, *, strict: bool | None = None) -> dict[str, Any]:
    """`tool` as an OpenAI tool dict (one already in that form is kept).

    Raises:
        ValueError: LangChain cannot convert it, or the result names no function.
    """
    openai_form = isinstance(tool, Mapping) and tool.get("type") == "function"
    if openai_form and not strict and isinstance(tool.get("function"), Mapping):
        converted: Any = dict(tool)
    else:
        converted = convert_to_openai_tool(tool, strict=strict)
    function = converted.get("function") if isinstance(converted, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        shown = repr(tool)
        raise ValueError(
            f"tools: {shown[:77] + '...' if len(shown) > 80 else shown} is not a tool ChatRLM can call: give a "
            "BaseTool, a function, a pydantic model or an OpenAI tool dict with a function name"
        )
    return dict(converted)


def message_tool_calls(result: RLMResult) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """The run's calls as LangChain's ``tool_calls`` and ``invalid_tool_calls``."""
    calls = [ToolCall(name=c.name, args=c.args, id=c.id, type="tool_call") for c in result.tool_calls]
    invalid = [
        InvalidToolCall(name=c.name, args=c.args, id=c.id, error=c.error, type="invalid_tool_call")
        for c in result.invalid_tool_calls
    ]
    return calls, invalid


def tool_call_chunks(result: RLMResult) -> list[ToolCallChunk]:
    """The run's valid calls as stream chunks, one per call (LangChain parses the arguments back on merge).

    A stream can only carry a call LangChain cannot parse as invalid; calls that parse but broke their
    schema travel in the last chunk's ``response_metadata["invalid_tool_calls"]`` instead.
    """
    return [
        ToolCallChunk(
            name=c.name, args=json.dumps(c.args, ensure_ascii=False), id=c.id, index=i, type="tool_call_chunk"
        )
        for i, c in enumerate(result.tool_calls)
    ]
