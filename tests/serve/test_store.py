"""Two real `rlm serve` replicas on one PostgreSQL store (issue 52): a request retried on the other replica is free."""

from __future__ import annotations

import openai
import pytest

from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer
from tests.postgres import PASSWORD
from tests.serve.test_shutdown import ServeProcess

CALLS = 3 + 12  # three root turns, two batches of six sub-calls
MESSAGES = [{"role": "user", "content": "the first document. Add up the magic numbers."}]


def _ask(replica: ServeProcess) -> str | None:
    client = openai.OpenAI(base_url=replica.base_url, api_key="unused", max_retries=0, timeout=120)
    reply = client.chat.completions.create(model="test", messages=MESSAGES)  # type: ignore[arg-type]
    return reply.choices[0].message.content


@pytest.mark.timeout(300)
def test_a_request_retried_on_another_replica_pays_no_call_the_first_got_back(store_url: str) -> None:
    with LedgerServer(root=BATCHES, latency=0.02) as upstream:
        first = ServeProcess(upstream, "--store", store_url)
        second = ServeProcess(upstream, "--store", store_url)
        try:
            assert _ask(first) == BATCHES_ANSWER
            assert len(upstream.arrived) == CALLS
            upstream.forget()
            assert _ask(second) == BATCHES_ANSWER
            assert upstream.arrived == [], "the second replica paid for replies the store held"
            # The same retry on a replica without the store pays every call again.
            alone = ServeProcess(upstream)
            upstream.forget()
            assert _ask(alone) == BATCHES_ANSWER
            assert len(upstream.arrived) == CALLS
            alone.kill()
        finally:
            first.kill()
            second.kill()
        assert not [line for line in first.lines + second.lines if PASSWORD in line]
