"""ChatRLM(cache=...): the engine's call cache, next to LangChain's own `cache` (whole answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from pydantic import ValidationError

from rlm_adapters import ScriptedModel
from rlm_adapters.core.cache import SQLiteCallCache
from rlm_adapters.core.lm.langchain_client import LangChainClient
from rlm_adapters.langchain import ChatRLM
from rlm_adapters.testing import by_turn

SCRIPT = ["```repl\nprint(llm_query_batched(['one', 'two']))\n```", "FINAL(done)"]


def chat(cache: Any, **options: Any) -> tuple[ChatRLM, ScriptedModel, ScriptedModel]:
    root, leaf = by_turn(*SCRIPT, model_name="root"), ScriptedModel(lambda m: "leaf", model_name="leaf")
    return (
        ChatRLM(
            direct_below_tokens=None, backend=root, other_backends=[leaf], environment="local", cache=cache, **options
        ),
        root,
        leaf,
    )


def test_a_path_is_the_engines_call_cache_opened_once(tmp_path: Path) -> None:
    first, root, leaf = chat(tmp_path / "calls.sqlite")
    assert isinstance(first.call_cache, SQLiteCallCache) and first.cache is None
    assert first.invoke("a question").content == "done"
    assert (len(root.calls), len(leaf.calls)) == (2, 2)
    again, root2, leaf2 = chat(str(tmp_path / "calls.sqlite"))
    message = again.invoke("a question")
    assert message.content == "done" and root2.calls == leaf2.calls == []
    usage = message.response_metadata["usage"]["total"]
    assert usage["cached_calls"] == usage["calls"] == 4
    # Issue 37: said in response_metadata; these scripted models have no price, so their cost is unknown.
    assert message.response_metadata["resumed"] == (
        "resumed: 4 of 4 model calls from the call cache, not paid again (cost unknown: no price for 'leaf', 'root')"
    )


def test_a_resumed_answer_says_what_its_replayed_calls_had_cost(tmp_path: Path) -> None:
    prices = {"root": (1000.0, 2000.0), "leaf": (1000.0, 2000.0)}  # dear enough for whole cents
    first, _root, _leaf = chat(tmp_path / "calls.sqlite", prices=prices)
    paid = first.invoke("a question").response_metadata["usage"]["total"]["cost"]
    again, _root2, _leaf2 = chat(tmp_path / "calls.sqlite", prices=prices)
    message = again.invoke("a question")
    assert paid >= 0.01 and message.response_metadata["usage"]["total"]["cost"] == 0.0
    assert message.response_metadata["resumed"] == (
        f"resumed: 4 of 4 model calls from the call cache, ${paid:.2f} not paid again"
    )


def test_langchains_own_cache_values_keep_their_meaning() -> None:
    whole_answers = InMemoryCache()
    model, _root, _leaf = chat(whole_answers)
    assert model.cache is whole_answers and model.call_cache is None
    model.invoke("q")
    assert len(whole_answers._cache) == 1  # LangChain cached the answer, as it does for any chat model
    off, _r, _l = chat(False)
    assert off.cache is False and off.call_cache is None


def test_a_file_that_is_not_a_cache_is_refused_naming_it(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(ValidationError, match=r"notes\.txt' is not an rlm-adapters call cache"):
        chat(notes)
    assert notes.read_text() == "mine"


def test_a_langchain_models_identity_is_its_settings_not_its_object() -> None:
    one = LangChainClient(FakeListChatModel(responses=["a"]))
    same = LangChainClient(FakeListChatModel(responses=["a"]))
    other = LangChainClient(FakeListChatModel(responses=["b"]))
    assert one.cache_identity() == same.cache_identity() != other.cache_identity()
