"""`ChatRLM.with_structured_output`, built on the engine's typed answers (``output_schema``).

The chat model is bound to ``rlm_output_schema``; its runs pass it to the engine as ``output_schema``, which
shows the root model the schema, validates the final value (a Pydantic model by Pydantic, any other schema
by `rlm_adapters.core.json_schema`) and sends an invalid one back (`rlm_adapters.core.output`). The message
then carries the value as JSON, and the parser below reads it in the form the method asks for:

- ``json_schema`` (the default) and ``json_mode``: the value from the message's JSON text (``json_mode``
  without a schema asks for any JSON object);
- ``function_calling``: the message carries the value as a tool call named after the schema, parsed as
  LangChain's tool-calling models are (``PydanticToolsParser`` / ``JsonOutputKeyToolsParser``).

A run that ends without a valid value raises `OutputParserException`, or, with ``include_raw=True``, gives
``{"raw": message, "parsed": None, "parsing_error": ...}``.
"""

from __future__ import annotations

import json
from typing import Any, Literal, cast

import pydantic
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers.openai_tools import JsonOutputKeyToolsParser, PydanticToolsParser
from langchain_core.runnables import Runnable, RunnableLambda, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass

Method = Literal["json_schema", "function_calling", "json_mode"]
METHODS: tuple[Method, ...] = ("json_schema", "function_calling", "json_mode")
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def engine_schema(schema: dict[str, Any] | type | None) -> dict[str, Any] | type:
    """What the engine validates against: a Pydantic 2 model as it is (Pydantic checks it), any other schema
    (a ``pydantic.v1`` model, a TypedDict, an OpenAI function) as its JSON schema."""
    if schema is None:
        return ANY_OBJECT
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        return schema
    return convert_to_json_schema(schema)


def checked(message: BaseMessage) -> BaseMessage:
    """`message`, when its run ended with a valid value; else the parser's error, with the run's reason."""
    metadata = message.response_metadata or {}
    finish = metadata.get("finish_reason", "final")
    if finish != "final":
        raise OutputParserException(
            f"ChatRLM could not produce a value matching the schema ({finish}): {metadata.get('error')}",
            llm_output=message.text,
        )
    return message


def as_tool_call(name: str) -> RunnableLambda[BaseMessage, BaseMessage]:
    """Turns the answer's JSON into one tool call named `name` (the ``function_calling`` method's shape)."""

    def convert(message: BaseMessage) -> BaseMessage:
        metadata = message.response_metadata or {}
        if metadata.get("finish_reason", "final") != "final" or not isinstance(message, AIMessage):
            return message  # the parser says what went wrong
        call = {"name": name, "args": json.loads(message.text), "id": f"call_{metadata.get('run_id', 'rlm')}"}
        return AIMessage(
            content="",
            tool_calls=[{**call, "type": "tool_call"}],
            response_metadata=message.response_metadata,
            usage_metadata=message.usage_metadata,
            id=message.id,
        )

    return RunnableLambda(convert, name="rlm_answer_as_tool_call")


def structured_output(
    llm: BaseChatModel,
    schema: dict[str, Any] | type | None,
    *,
    include_raw: bool = False,
    method: Method | None = None,
    strict: bool | None = None,
    **kwargs: Any,
) -> Runnable[LanguageModelInput, Any]:
    """`llm` answering with a value matching `schema`: the body of `ChatRLM.with_structured_output`.

    Args:
        llm: The chat model; it is bound to ``rlm_output_schema``, which its runs pass to the engine.
        schema: A Pydantic model, a TypedDict, a JSON schema or an OpenAI function schema (None only
            with ``method="json_mode"``: any JSON object).
        include_raw: Return ``{"raw", "parsed", "parsing_error"}`` instead of the parsed value.
        method: ``json_schema`` (default), ``function_calling`` or ``json_mode``.
        strict: Accepted for compatibility: the engine always validates the value against the schema.
        **kwargs: Refused (none is known).

    Raises:
        ValueError: An unknown method or keyword argument, or no schema for a method that needs one.
    """
    del strict  # the value is always checked against the whole schema
    if kwargs:
        raise ValueError(f"with_structured_output got unsupported arguments {sorted(kwargs)!r}")
    method = method or "json_schema"
    if method not in METHODS:
        raise ValueError(f"with_structured_output: method={method!r} is not one of {list(METHODS)}")
    if schema is None and method != "json_mode":
        raise ValueError(f"with_structured_output: method={method!r} needs a schema (json_mode alone takes None)")
    bound: Runnable[LanguageModelInput, BaseMessage] = llm.bind(
        ls_structured_output_format={"kwargs": {"method": method}, "schema": schema},
        rlm_output_schema=engine_schema(schema),
    )
    model_class = schema if isinstance(schema, type) and is_basemodel_subclass(schema) else None
    parser: Runnable[BaseMessage, Any]
    if method == "function_calling":
        assert schema is not None
        name = convert_to_openai_tool(schema)["function"]["name"]
        bound = bound | as_tool_call(name)
        tools_parser: Runnable[BaseMessage, Any] = (
            PydanticToolsParser(tools=[model_class], first_tool_only=True)
            if model_class is not None
            else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
        )
        parser = RunnableLambda(checked, name="check_rlm_run") | tools_parser
    else:

        def parse(message: BaseMessage) -> Any:
            value = json.loads(checked(message).text)
            if model_class is None:
                return value
            # pydantic 2 models validate with `model_validate`, the v1 shim with `parse_obj`.
            validate = getattr(model_class, "model_validate", None) or cast(Any, model_class).parse_obj
            return validate(value)

        parser = RunnableLambda(parse, name="parse_rlm_output")
    if not include_raw:
        return bound | parser
    assign = RunnablePassthrough.assign(parsed=lambda d: parser.invoke(d["raw"]), parsing_error=lambda _: None)
    fallback = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=bound) | assign.with_fallbacks([fallback], exception_key="parsing_error")
