"""Issue 51: a failed run of ChatRLM raises the engine's own `RLMRunFailed` (the class `RLM` raises) with the
result on it."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters.errors import RLMError, RLMRunFailed
from rlm_adapters.langchain import ChatRLM
from rlm_adapters.testing import FakeOpenAIServer


def test_a_failed_run_raises_the_engines_class_with_the_result(
    lc_server: FakeOpenAIServer, chat_options: dict[str, Any]
) -> None:
    lc_server.fail_next(404, message="The model `gpt-5-mni` does not exist")
    with pytest.raises(RLMRunFailed, match="gpt-5-mni") as caught:
        ChatRLM(**{**chat_options, "model": "gpt-5-mni"}).invoke("How long is it?")
    assert isinstance(caught.value, RLMError)
    assert caught.value.result.finish_reason == "error" and caught.value.result.response == ""
