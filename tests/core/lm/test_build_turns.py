"""A batch's requests are built one at a time and each goes out before the next is built (`_build_turns`).

Through the real OpenAI SDK and httpx2 against the local fake server: the client's own ``http_client``
records, per request, when the SDK had built it (a request hook) and when its body was on the wire
(httpcore2's trace of ``send_request_body``). Before, every call of a batch was built first and the first
request went out after the last build (issue 53).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.testing import FakeOpenAIServer

CALLS = 32
NUMBERS = [str(1000 + i) for i in range(CALLS)]  # what the fake server's leaf answers to each prompt


def _prompt(i: int) -> list[Any]:
    return [{"role": "user", "content": f"the magic number is {NUMBERS[i]}"}]


def _recording_client(log: list[str], *, refuse_first: bool = False) -> httpx2.AsyncClient:
    """An http_client whose request hook logs 'built' and whose trace logs 'sent' (the body on the wire)."""
    refused: list[bool] = []

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == "http11.send_request_body.complete":
            log.append("sent")

    async def on_request(request: httpx2.Request) -> None:
        if refuse_first and not refused:  # a build that fails: the SDK never sends this request
            refused.append(True)
            raise RuntimeError("this request was refused by a hook before it was sent")
        log.append("built")
        request.extensions["trace"] = trace

    return httpx2.AsyncClient(event_hooks={"request": [on_request]})


async def _batch(client: Any) -> list[Any]:
    calls = (client.acomplete(_prompt(i)) for i in range(CALLS))
    return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=60)


async def test_a_batchs_requests_go_out_while_the_rest_are_still_being_built() -> None:
    log: list[str] = []
    with FakeOpenAIServer(latency=0.05) as server:
        client = OpenAIClient("leaf", base_url=server.base_url, api_key="k", http_client=_recording_client(log))
        replies = await _batch(client)
        await client.aclose()
    assert [r.text for r in replies] == NUMBERS
    _assert_sent_while_building(log)


async def test_an_anthropic_batch_goes_out_while_it_is_still_being_built() -> None:
    pytest.importorskip("anthropic", reason="needs the anthropic extra (the anthropic SDK)")
    from rlm_adapters.core.lm.anthropic_client import AnthropicClient
    from rlm_adapters.testing.fake_anthropic import FakeAnthropicServer

    log: list[str] = []
    with FakeAnthropicServer(latency=0.05) as server:
        client = AnthropicClient(
            "claude-haiku-4-5", base_url=server.url, api_key="k", http_client=_recording_client(log)
        )
        replies = await _batch(client)
        await client.aclose()
    assert [r.text for r in replies] == NUMBERS
    _assert_sent_while_building(log)


def _assert_sent_while_building(log: list[str]) -> None:
    assert log.count("built") == log.count("sent") == CALLS
    last_built = len(log) - 1 - log[::-1].index("built")
    # Built all at once, the first request would go out after the last was built.
    assert log.index("sent") < last_built, log


async def test_a_build_that_fails_hands_the_turn_on_and_the_other_calls_are_answered() -> None:
    log: list[str] = []
    with FakeOpenAIServer() as server:
        http_client = _recording_client(log, refuse_first=True)
        client = OpenAIClient("leaf", base_url=server.base_url, api_key="k", http_client=http_client)
        replies = await _batch(client)
        await client.aclose()
    failed = [i for i, r in enumerate(replies) if isinstance(r, BaseException)]
    assert len(failed) == 1 and "refused by a hook" in str(replies[failed[0]])
    assert [r.text for r in replies if not isinstance(r, BaseException)] == NUMBERS[: failed[0]] + NUMBERS[
        failed[0] + 1 :
    ]


async def test_a_call_cancelled_while_it_waits_for_its_turn_leaves_the_rest_to_finish() -> None:
    with FakeOpenAIServer(latency=0.05) as server:
        client = OpenAIClient("leaf", base_url=server.base_url, api_key="k")
        tasks = [asyncio.create_task(client.acomplete(_prompt(i))) for i in range(CALLS)]
        await asyncio.sleep(0)  # every call has started; most wait for their turn
        tasks[CALLS // 2].cancel()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=60)
        await client.aclose()
    assert isinstance(done[CALLS // 2], asyncio.CancelledError)
    assert [d.text for i, d in enumerate(done) if i != CALLS // 2] == NUMBERS[: CALLS // 2] + NUMBERS[CALLS // 2 + 1 :]
