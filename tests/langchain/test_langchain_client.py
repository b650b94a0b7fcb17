"""`backend="langchain"`: any LangChain chat model as an engine model client."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from rlm_adapters import RLM
from rlm_adapters.core.lm.langchain_client import LangChainClient
from rlm_adapters.errors import ConfigurationError, ModelError


class Broken(GenericFakeChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("provider is down")


async def test_usage_comes_from_usage_metadata_or_is_estimated() -> None:
    usage = {"input_tokens": 11, "output_tokens": 4, "total_tokens": 15}
    model = GenericFakeChatModel(messages=iter([AIMessage("one", usage_metadata=usage), AIMessage("two")]))
    client = LangChainClient(model, model_name="fake")
    first = await client.acomplete([{"role": "system", "content": "s"}, {"role": "user", "content": "x" * 400}])
    assert (first.text, first.input_tokens, first.output_tokens, first.model) == ("one", 11, 4, "fake")
    second = await client.acomplete([{"role": "user", "content": "x" * 400}])
    assert second.text == "two" and second.input_tokens == 100 and second.output_tokens >= 1


async def test_failures_are_model_errors_and_bad_models_are_refused() -> None:
    client = LangChainClient(Broken(messages=iter([])))
    assert client.model_name == "generic-fake-chat-model"
    with pytest.raises(ModelError, match="provider is down"):
        await client.acomplete([{"role": "user", "content": "hi"}])
    with pytest.raises(ConfigurationError, match="LangChain chat model"):
        LangChainClient("gpt-5")  # type: ignore[arg-type]


def test_backend_by_name_in_the_engine() -> None:
    root = GenericFakeChatModel(
        messages=iter([AIMessage("```repl\nn = len(context)\n```"), AIMessage("FINAL_VAR('n')")])
    )
    rlm = RLM(backend="langchain", backend_kwargs={"model": root}, environment="local")
    result = rlm.completion("12345", "how long?")
    assert result.response == "5" and result.usage_summary.root.calls == 2
