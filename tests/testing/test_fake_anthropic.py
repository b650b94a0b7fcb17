"""The Anthropic wire fake through the real `anthropic` SDK: its answers, its refusals, and its prompt-cache bill."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic", reason="the Anthropic fake is tested with the anthropic SDK")

from rlm_adapters.testing import FakeAnthropicServer  # noqa: E402
from rlm_adapters.testing._prompt_cache import Bill  # noqa: E402

BIG = "x" * 4400  # 1,100 tokens: over the 1,024-token minimum on its own
MARK = {"type": "ephemeral"}


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(leaf=lambda prompt: f"echo {len(prompt)}") as running:
        yield running


def sdk(server: FakeAnthropicServer) -> Any:
    return anthropic.Anthropic(base_url=server.url, api_key="sk-ant-fake", max_retries=0)


def block(text: str, cached: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": text, **({"cache_control": MARK} if cached else {})}


def ask(server: FakeAnthropicServer, system: list[dict[str, Any]], turns: list[dict[str, Any]]) -> Any:
    return sdk(server).messages.create(model="claude-haiku-4-5", max_tokens=64, system=system, messages=turns)


def test_a_plain_request_is_answered_with_the_sdks_types(server: FakeAnthropicServer) -> None:
    reply = sdk(server).messages.create(
        model="claude-haiku-4-5", max_tokens=10, messages=[{"role": "user", "content": "hello"}]
    )
    assert isinstance(reply, anthropic.types.Message)
    assert reply.content[0].text == "echo 5" and reply.stop_reason == "end_turn"
    assert (reply.usage.input_tokens, reply.usage.cache_read_input_tokens, reply.usage.cache_creation_input_tokens) == (
        2,
        0,
        0,
    )
    assert server.counters.leaf_requests == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"messages": [{"role": "user", "content": ""}]}, "text content blocks must be non-empty"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "Input should be 'user' or 'assistant'"),
        (
            {"messages": [{"role": "user", "content": [block(str(i), cached=True) for i in range(5)]}]},
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "only text blocks"),
    ],
)
def test_requests_the_api_refuses_are_refused_with_its_words(
    server: FakeAnthropicServer, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk(server).messages.create(model="claude-haiku-4-5", max_tokens=10, **kwargs)
    assert message in str(caught.value)
    assert server.cache.bill.requests == 0  # a refused request is not billed


def test_faults_come_back_as_the_sdks_errors(server: FakeAnthropicServer) -> None:
    server.fail_next(status=429)
    with pytest.raises(anthropic.RateLimitError):
        sdk(server).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    server.fail_next(status=529)
    with pytest.raises(anthropic.APIStatusError) as caught:
        sdk(server).messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 529 and "overloaded_error" in str(caught.value.body)


def test_a_prefix_is_read_only_after_it_was_written(server: FakeAnthropicServer) -> None:
    system = [block(BIG, cached=True)]
    first = ask(server, system, [{"role": "user", "content": [block("q1", cached=True)]}])
    # Nothing was cached before: the whole prefix up to the last breakpoint is written.
    assert (first.usage.cache_read_input_tokens, first.usage.cache_creation_input_tokens) == (0, 1100 + 1)
    assert first.usage.input_tokens == 0
    turns = [
        {"role": "user", "content": [block("q1", cached=True)]},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": [block("q2", cached=True)]},
    ]
    second = ask(server, system, turns)
    assert second.usage.cache_read_input_tokens == 1101  # system + q1, written by the first request
    assert second.usage.cache_creation_input_tokens == 2  # a1 and q2
    assert second.usage.input_tokens == 0
    # Another system prompt is another prefix: nothing of it was written, so nothing is read.
    other = ask(server, [block(BIG + "!", cached=True)], [{"role": "user", "content": "q1"}])
    assert other.usage.cache_read_input_tokens == 0 and other.usage.cache_creation_input_tokens == 1101
    assert other.usage.input_tokens == 1
    assert server.cache.bill == Bill(input_tokens=1, cache_read_tokens=1101, cache_write_5m_tokens=2204, requests=3)
    assert server.cache.bill.input_units == pytest.approx(1 + 0.1 * 1101 + 1.25 * 2204)


def test_no_breakpoint_no_cache_and_a_short_prefix_caches_nothing(server: FakeAnthropicServer) -> None:
    plain = ask(server, [block(BIG)], [{"role": "user", "content": "q"}])
    again = ask(server, [block(BIG)], [{"role": "user", "content": "q"}])
    assert plain.usage.input_tokens == again.usage.input_tokens == 1101
    assert again.usage.cache_read_input_tokens == 0  # no request ever asked for the prefix to be cached
    short = [block("short system", cached=True)]
    for _ in range(2):
        reply = ask(server, short, [{"role": "user", "content": "q"}])
        assert (reply.usage.cache_read_input_tokens, reply.usage.cache_creation_input_tokens) == (0, 0)


def test_the_look_back_finds_a_written_prefix_at_most_20_blocks_back(server: FakeAnthropicServer) -> None:
    system = [block(BIG, cached=True)]
    ask(server, [block(BIG)], [{"role": "user", "content": [block("q", cached=True)]}])  # writes system + q
    near = [block("q"), *[block(f"n{i}") for i in range(19)]]
    near[-1]["cache_control"] = MARK
    hit = ask(server, [block(BIG)], [{"role": "user", "content": near}])
    assert hit.usage.cache_read_input_tokens == 1101  # 19 blocks after the written prefix: within the look-back
    far = [block("q"), *[block(f"f{i}") for i in range(21)]]
    far[-1]["cache_control"] = MARK
    miss = ask(server, [block(BIG)], [{"role": "user", "content": far}])
    assert miss.usage.cache_read_input_tokens == 0  # 21 blocks after it: out of reach
    assert system  # the breakpoint on the system block is not needed for the look-back


def test_a_one_hour_write_is_billed_at_twice_the_input_price(server: FakeAnthropicServer) -> None:
    system = [{"type": "text", "text": BIG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    reply = ask(server, system, [{"role": "user", "content": "q"}])
    assert reply.usage.cache_creation is not None
    assert reply.usage.cache_creation.ephemeral_1h_input_tokens == 1100
    assert server.cache.bill.input_units == pytest.approx(1 + 2.0 * 1100)
