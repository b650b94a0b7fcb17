"""The OpenTelemetry GenAI semantic conventions as this package writes them, and what content may be traced.

Attribute names are those of the conventions (``gen_ai.*``, semantic-conventions 1.37+: ``gen_ai.provider.name``
replaced ``gen_ai.system``); ``gen_ai.usage.cost`` (USD) is not in them but is what Langfuse and OpenLIT read;
``rlm.*`` names are this package's own. Prompt and completion text is written only when the conventions'
switch ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for it on spans (``true``, ``span_only`` or
``span_and_event``); the context itself (and its description's preview and keys) never is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from rlm_adapters.core.events import cut
from rlm_adapters.core.lm import ModelClient

CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_ON = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})
# One captured text (a prompt, a reply, a cell's output) on a span, at most.
MAX_CONTENT_CHARS = 16_000
CONTEXT_PLACEHOLDER = "[the description of the context is not traced]"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
COST = "gen_ai.usage.cost"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"

# The client modules of `core/lm/` and the provider names the conventions give them.
_PROVIDERS = {
    "openai_client": "openai",
    "azure_client": "azure.ai.openai",
    "anthropic_client": "anthropic",
    "bedrock_client": "aws.bedrock",
    "gemini_client": "gcp.gemini",
    "litellm_client": "litellm",
    "langchain_client": "langchain",
    "llama_index_client": "llama_index",
    "scripted": "rlm.scripted",
}


def content_enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether the conventions' switch asks for message content on spans."""
    value = (os.environ if environ is None else environ).get(CONTENT_VARIABLE, "")
    return value.strip().lower() in CONTENT_ON


def provider_name(client: ModelClient) -> str:
    """The ``gen_ai.provider.name`` of a model client (an OpenAI-compatible gateway: its backend's name)."""
    if client.gen_ai_provider:
        return client.gen_ai_provider
    kind = type(client.implementation)
    module = kind.__module__.rsplit(".", 1)[-1]
    if module == "gateways":
        return client.backend or "openai"
    return _PROVIDERS.get(module, kind.__name__.lower())


def text_parts(role: str, text: str, **extra: Any) -> dict[str, Any]:
    """One message in the conventions' JSON shape (``{"role", "parts": [{"type": "text", "content"}]}``)."""
    return {"role": role, "parts": [{"type": "text", "content": cut(text, MAX_CONTENT_CHARS)}], **extra}


def messages_json(messages: list[dict[str, Any]]) -> str:
    """Messages as the JSON string the conventions' message attributes hold."""
    return json.dumps(messages, ensure_ascii=False)


def error_type(error: str) -> str:
    """A short, content-free name for a cell's error: the exception's class from the traceback's last line."""
    last = error.strip().splitlines()[-1] if error.strip() else ""
    name = last.split(":", 1)[0].strip()
    return name if name.isidentifier() else "cell_error"


@dataclass
class Usage:
    """Tokens and cost added up over a run level, written as the conventions' usage attributes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float = 0.0

    def add(self, other: Usage) -> None:
        """Count `other` in (a finished call's, or a nested run's)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.cost += other.cost

    def attributes(self) -> dict[str, Any]:
        """The usage attributes of a span."""
        return {
            INPUT_TOKENS: self.input_tokens,
            OUTPUT_TOKENS: self.output_tokens,
            CACHE_READ_TOKENS: self.cache_read,
            CACHE_WRITE_TOKENS: self.cache_write,
            COST: round(self.cost, 8),
        }
