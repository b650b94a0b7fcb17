"""Issue 51, item 1: a failed run no longer looks like an empty answer from Python.

A newcomer's misspelt model (``gpt-5-mni``) made ``RLM.completion`` return ``response == ''`` and
``finish_reason == 'error'``, the reason only in ``result.error``: the README's snippet printed an empty line.
Now `RLM` raises `RLMRunFailed` (an `RLMError`, carrying the result), as `ChatRLM` and the LlamaIndex LLM do
with the same class (tests/langchain/test_empty_and_failed.py); ``raise_on_error=False`` returns the result
instead; a run a limit ends still returns its partial answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters import RLM, ModelError, RLMError, RLMRunFailed, ScriptedModel
from rlm_adapters.testing import FakeOpenAIServer

MISSING = "The model `gpt-5-mni` does not exist or you do not have access to it."


def _typo(server: FakeOpenAIServer, **options: Any) -> RLM:
    server.fail_next(404, message=MISSING)
    kwargs = {"model_name": "gpt-5-mni", "base_url": server.base_url, "api_key": "k", "max_retries": 0}
    return RLM(backend="openai", backend_kwargs=kwargs, environment="local", **options)


def test_a_misspelt_model_raises_with_the_reason_and_the_result(fake_server: FakeOpenAIServer) -> None:
    with pytest.raises(RLMRunFailed) as caught:
        _typo(fake_server).completion("some context", root_prompt="How long is it?")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the RLM run failed: ") and "gpt-5-mni" in message
    result = caught.value.result
    assert result.finish_reason == "error" and result.response == ""
    assert "gpt-5-mni" in (result.error or "")
    assert isinstance(caught.value, RLMError)  # what every front end already catches


async def test_the_async_path_raises_too(fake_server: FakeOpenAIServer) -> None:
    with pytest.raises(RLMRunFailed, match="gpt-5-mni"):
        await _typo(fake_server).acompletion("some context", "How long is it?")


async def test_astream_yields_the_events_then_raises(fake_server: FakeOpenAIServer) -> None:
    kinds = []
    with pytest.raises(RLMRunFailed):
        async for event in _typo(fake_server).astream("some context", "How long is it?"):
            kinds.append(type(event).__name__)
    assert kinds[-1] == "RunFinished"  # the events up to the end, then the failure


def test_raise_on_error_false_returns_the_result(fake_server: FakeOpenAIServer) -> None:
    result = _typo(fake_server, raise_on_error=False).completion("some context", "How long is it?")
    assert result.finish_reason == "error" and "gpt-5-mni" in (result.error or "")


def test_the_setting_is_an_attribute_like_every_option(fake_server: FakeOpenAIServer) -> None:
    rlm = _typo(fake_server)
    rlm.raise_on_error = False
    assert rlm.completion("some context", "q").finish_reason == "error"
    with pytest.raises(TypeError, match=r"did you mean .raise_on_error.\?"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), raise_on_eror=False)


def test_a_run_a_limit_ends_returns_its_partial_answer() -> None:
    root = ScriptedModel(["I am still looking.\n```repl\nprint(1)\n```"] * 3, model_name="m")
    result = RLM(backend=root, environment="local", max_iterations=2).completion("context", "q")
    assert result.finish_reason == "max_iterations" and result.response


def test_a_typed_answer_still_invalid_raises_with_the_last_value() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    script = ["```repl\nv = {'n': 'x'}\nFINAL_VAR('v')\n```"] * 3
    rlm = RLM(backend=ScriptedModel(script, model_name="m"), environment="local")
    with pytest.raises(RLMRunFailed, match="invalid") as caught:
        rlm.completion("context", "q", output_schema=schema, output_retries=1)
    assert caught.value.result.final_value == {"n": "x"}


def test_the_message_is_one_line_whatever_the_reason_holds() -> None:
    def broken(_messages: Any) -> str:
        raise ModelError("the provider said:\n  1 validation error\n\tfield required", model="m")

    with pytest.raises(RLMRunFailed) as caught:
        RLM(backend=ScriptedModel(broken, model_name="m"), environment="local").completion("context", "q")
    assert str(caught.value) == "the RLM run failed: the provider said: 1 validation error field required"
    assert "\n  1 validation error\n" in (caught.value.result.error or "")  # the whole text stays on the result
