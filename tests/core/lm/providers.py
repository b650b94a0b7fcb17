"""The provider backends the wire tests run against: each backend with the fake server speaking its wire format."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from rlm_adapters.testing import (
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeModelServer,
    FakeOpenAIServer,
)


@dataclass(frozen=True)
class Provider:
    name: str
    server: type[FakeModelServer]
    root: str
    sub: str
    settings: Callable[[Any], dict[str, Any]]
    auth: tuple[str, str]  # a header every request carries, and text its value contains
    module: str  # the SDK the backend needs
    label: str  # how error messages name the provider
    reads_capped: bool = True  # max_reply_bytes stops the read itself (False: checked once the reply is in)


PROVIDERS = [
    Provider(
        "bedrock",
        FakeBedrockServer,
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        lambda s: {
            "region_name": "us-east-1",
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": "not-a-secret",
            "endpoint_url": s.url,
            "max_tokens": 2048,
        },
        ("authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"),
        "boto3",
        "Bedrock",
    ),
    Provider(
        "gemini",
        FakeGeminiServer,
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        lambda s: {"api_key": "gemini-key", "base_url": s.url, "temperature": 0.0},
        ("x-goog-api-key", "gemini-key"),
        "google.genai",
        "Gemini",
    ),
    Provider(
        "azure_openai",
        FakeOpenAIServer,
        "gpt-5",
        "gpt-5-mini",
        lambda s: {"azure_endpoint": s.url, "api_version": "2024-10-21", "api_key": "azure-key"},
        ("api-key", "azure-key"),
        "openai",
        "Azure OpenAI",
    ),
    Provider(
        "portkey",
        FakeOpenAIServer,
        "gpt-5",
        "gpt-5-mini",
        lambda s: {"base_url": s.base_url, "portkey_api_key": "portkey-key", "virtual_key": "openai-vk"},
        ("x-portkey-virtual-key", "openai-vk"),
        "openai",
        "Portkey",
    ),
    Provider(
        "vercel",
        FakeOpenAIServer,
        "openai/gpt-5",
        "openai/gpt-5-mini",
        lambda s: {"base_url": s.base_url, "api_key": "vercel-key"},
        ("authorization", "Bearer vercel-key"),
        "openai",
        "Vercel AI Gateway",
    ),
    Provider(
        "litellm",
        FakeOpenAIServer,
        "openai/gpt-4-turbo",  # priced by LiteLLM, not by the engine's table: the cost must be LiteLLM's figure
        "openai/gpt-5-mini",
        lambda s: {"api_base": s.base_url, "api_key": "litellm-key"},
        ("authorization", "Bearer litellm-key"),
        "litellm",
        "LiteLLM",
        reads_capped=False,
    ),
]

# The SDK clients the fault tests cover besides those above (the OpenAI and Anthropic SDKs themselves).
OPENAI = Provider(
    "openai",
    FakeOpenAIServer,
    "gpt-5",
    "gpt-5-mini",
    lambda s: {"base_url": s.base_url, "api_key": "openai-key"},
    ("authorization", "Bearer openai-key"),
    "openai",
    "OpenAI",
)
ANTHROPIC = Provider(
    "anthropic",
    FakeAnthropicServer,
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    lambda s: {"base_url": s.url, "api_key": "anthropic-key"},
    ("x-api-key", "anthropic-key"),
    "anthropic",
    "Anthropic",
)
# One backend per wire format and SDK: OpenAI, Anthropic, Bedrock, Gemini, and LiteLLM over OpenAI's wire.
FAULT_PROVIDERS = [OPENAI, ANTHROPIC, *(p for p in PROVIDERS if p.name in ("bedrock", "gemini", "litellm"))]


def installed_provider(request: pytest.FixtureRequest) -> Provider:
    """The provider a parametrized fixture stands for, or a skip naming the SDK it needs."""
    from .extras import installed

    spec: Provider = request.param
    if not installed(spec.module):
        pytest.skip(f"the {spec.name} backend needs {spec.module!r} (pip install the matching rlm-adapters extra)")
    return spec
