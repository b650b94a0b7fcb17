"""Issue 54: ChatRLM takes max_reply_tokens and cell_timeout like every option, and refuses a misspelt one
(pydantic's default dropped it in silence, and the real model's replies ran uncapped)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from rlm_adapters.langchain import ChatRLM
from rlm_adapters.langchain._engine import build_engine

LOCAL = {"backend": "openai", "backend_kwargs": {"model_name": "m", "base_url": "http://127.0.0.1:9/v1"}}


def test_the_reply_cap_and_the_cell_timeout_reach_the_engine() -> None:
    chat = ChatRLM(**LOCAL, max_reply_tokens=64, cell_timeout=9)
    rlm = build_engine(chat)
    assert rlm.max_reply_tokens == 64
    assert rlm.environment_kwargs["cell_timeout"] == 9


def test_a_misspelt_option_is_refused_naming_the_closest() -> None:
    with pytest.raises(
        ValueError, match=r"unexpected keyword argument 'max_reply_tokenz'; did you mean 'max_reply_tokens'"
    ):
        ChatRLM(**LOCAL, max_reply_tokenz=64)
