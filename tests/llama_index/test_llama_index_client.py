"""LlamaIndex LLMs as root and sub models: MockLLM, a custom LLM that reports usage, failures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import PrivateAttr

from rlm_adapters import RLM, ModelError
from rlm_adapters.core.lm import client_identity
from rlm_adapters.core.lm.llama_index_client import LlamaIndexClient
from rlm_adapters.core.lm.registry import make_client
from rlm_adapters.errors import ConfigurationError, RLMRunFailed
from rlm_adapters.llama_index import RLMQueryEngine


class ScriptedRootLLM(CustomLLM):
    """A completion-style LlamaIndex LLM that plays root turns and reports its token usage."""

    replies: list[str]
    fail: bool = False
    _turn: int = PrivateAttr(default=0)
    _prompts: list[str] = PrivateAttr(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="scripted-root-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        if self.fail:
            raise RuntimeError("provider is down")
        self._prompts.append(prompt)
        reply = self.replies[min(self._turn, len(self.replies) - 1)]
        self._turn += 1
        return CompletionResponse(text=reply, additional_kwargs={"prompt_tokens": 111, "completion_tokens": 7})

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


DOCS = [
    Document(text="Alpha team notes. The quarterly budget was approved at 1.2 million euros by the board.", id_="a"),
    Document(text="Beta team notes. Hiring is frozen until the next planning cycle starts in March.", id_="b"),
]
ASK_SUB = """```repl
answer = llm_query("Summarise: " + context[0]["text"])
print(len(answer))
```"""


def test_a_llama_index_llm_is_root_and_mock_llm_is_sub_with_usage() -> None:
    root = ScriptedRootLLM(replies=[ASK_SUB, "FINAL(approved)"])
    engine = RLMQueryEngine.from_documents(DOCS, llm=root, sub_llm=MockLLM(), environment="local")
    response = engine.query("Was the budget approved?")
    assert response.response == "approved"
    usage = (response.metadata or {})["usage"]
    # The custom LLM reported its tokens: they are used as is; MockLLM reports none: estimated.
    assert usage["by_model"]["scripted-root-llm"] == {
        "calls": 2,
        "input_tokens": 222,
        "output_tokens": 14,
        "cost": 0.0,
    }
    assert usage["by_model"]["MockLLM"]["calls"] == 1 and usage["by_model"]["MockLLM"]["input_tokens"] > 0
    # MockLLM echoes its prompt, which held document "a": the sub-call makes it a source, not "b".
    assert [n.node.node_id for n in response.source_nodes] == ["a"]


def test_backend_name_llama_index_builds_the_client() -> None:
    root = ScriptedRootLLM(replies=["FINAL(ok)"])
    rlm = RLM(backend="llama_index", backend_kwargs={"llm": root}, environment="local")
    result = rlm.completion("some context text", "question")
    assert result.response == "ok"
    assert result.usage_summary.to_dict()["root"]["input_tokens"] == 111
    client = make_client("llama_index", {"llm": MockLLM(), "model_name": "mock-7b"})
    assert isinstance(client, LlamaIndexClient) and client.model_name == "mock-7b"


async def test_usage_from_a_raw_provider_response() -> None:
    class RawUsageLLM(ScriptedRootLLM):
        @llm_completion_callback()
        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            usage = {"input_tokens": 40, "output_tokens": 3}  # Anthropic-style names
            return CompletionResponse(text="hi", raw={"usage": usage})

    reply = await LlamaIndexClient(RawUsageLLM(replies=[])).acomplete([{"role": "user", "content": "hello"}])
    assert (reply.text, reply.input_tokens, reply.output_tokens) == ("hi", 40, 3)


async def test_a_failing_llm_raises_model_error_naming_it() -> None:
    client = LlamaIndexClient(ScriptedRootLLM(replies=[], fail=True))
    with pytest.raises(ModelError, match=r"'scripted-root-llm' failed: RuntimeError: provider is down"):
        await client.acomplete([{"role": "user", "content": "hello"}])


def test_a_failing_root_llm_ends_the_query_with_an_error_finish() -> None:
    engine = RLMQueryEngine.from_documents(DOCS, llm=ScriptedRootLLM(replies=[], fail=True), environment="local")
    with pytest.raises(RLMRunFailed, match="provider is down") as caught:  # not an empty answer (issue 51)
        engine.query("anything")
    assert caught.value.result.finish_reason == "error"
    quiet = RLMQueryEngine.from_documents(
        DOCS, llm=ScriptedRootLLM(replies=[], fail=True), environment="local", raise_on_error=False
    )
    response = quiet.query("anything")
    meta = response.metadata or {}
    assert meta["finish_reason"] == "error" and "provider is down" in meta["error"]
    assert response.source_nodes == []


def test_not_an_llm_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=r"needs backend_kwargs=\{'llm': <a LlamaIndex LLM>\}, got 'gpt'"):
        LlamaIndexClient("gpt")  # type: ignore[arg-type]


class KeyedLLM(ScriptedRootLLM):
    """An LLM holding its key as a field, as provider LLMs do (``OpenAI(api_key=...)``)."""

    api_key: str = "sk-planted-in-a-field"
    temperature: float = 0.0


def test_an_llms_identity_is_its_settings_without_its_key() -> None:
    identity = client_identity(LlamaIndexClient(KeyedLLM(replies=["x"])))
    assert "sk-planted-in-a-field" not in json.dumps(identity) and identity["settings"]["temperature"] == 0.0
    assert identity == client_identity(LlamaIndexClient(KeyedLLM(replies=["x"], api_key="another")))
    assert identity != client_identity(LlamaIndexClient(KeyedLLM(replies=["x"], temperature=0.7)))
