"""LangChain's standard suites for chat models, run with no network (the fake server is on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_tests.integration_tests import ChatModelIntegrationTests
from langchain_tests.unit_tests import ChatModelUnitTests

from rlm_adapters.langchain import ChatRLM
from rlm_adapters.testing import FakeOpenAIServer
from tests.langchain.policies import standard_root


class ToolCalling:
    """ChatRLM calls tools (bind_tools) and honours tool_choice: both suites run their tool tests."""

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True


class TestChatRLMUnit(ToolCalling, ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ChatRLM

    @property
    def chat_model_params(self) -> dict[str, Any]:
        # No server is needed: the unit suite only builds models and reads their parameters.
        return {
            "model": "root-model",
            "base_url": "http://127.0.0.1:9/v1",
            "environment": "local",
            "direct_below_tokens": None,
        }

    @property
    def init_from_env_params(self) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
        return {"OPENAI_API_KEY": "env-key"}, {"model": "root-model"}, {"model_name": "root-model"}


class TestChatRLMIntegration(ToolCalling, ChatModelIntegrationTests):
    base_url: str = ""

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _server(cls) -> Iterator[None]:
        with FakeOpenAIServer(root=standard_root) as server:
            cls.base_url = server.base_url
            yield

    @property
    def chat_model_class(self) -> type[BaseChatModel]:
        return ChatRLM

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {
            "model": "root-model",
            "base_url": self.base_url,
            "api_key": "test-key",
            "direct_below_tokens": None,  # the suites' answers are the scripted RLM's (`standard_root`)
            "environment": "local",
            "max_iterations": 4,
        }

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def supports_json_mode(self) -> bool:
        return True  # with_structured_output has one method; "json_mode" is accepted as a name for it

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def model_override_value(self) -> str:
        return "root-model-override"
