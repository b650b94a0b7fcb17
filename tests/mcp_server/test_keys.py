"""The store's keys on ``rlm-mcp --http --store postgresql://...`` (issue 52): each key is its own principal (its
background runs are visible to it alone), what its runs spend is recorded under it, a key over budget is refused
with the budget and its reset, and a revoked key gets the 401 a wrong token gets."""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg
import pytest
from mcp_types import CallToolResult

from rlm_adapters.core.cache import KeyStore
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import server_env
from tests.mcp_server.test_http import TOKEN, connect, served

ANSWER = "4242\n\nSources:\n- docs/a.md:1"
PRICES = ("--price", "root-model=10,40", "--price", "leaf-model=2,8")


def text_of(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def spent_calls(store_url: str, name: str) -> int:
    """The model calls the store recorded as `name`'s spend."""
    with psycopg.connect(store_url) as connection:
        row = connection.execute("SELECT coalesce(sum(calls), 0) FROM rlm_key_spend WHERE key_name = %s", (name,))
        found = row.fetchone()
    assert found is not None
    return int(found[0])


@pytest.mark.slow
async def test_two_keys_see_only_their_own_background_runs_and_each_pays_for_its_own(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, store_url: str, keys: KeyStore
) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    fake_server.root_latency = 0.3
    alice, bob = keys.add("alice"), keys.add("bob")
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--token", TOKEN, "--store", store_url, *PRICES) as (_process, url):
        async with connect(url, mode="legacy", token=alice) as first:
            started = await first.call(query="magic?", paths=["docs/a.md"], background=True)
            assert not started.is_error, text_of(started)
            run_id = str(started.structured_content["run_id"])
        async with connect(url, mode="legacy", token=bob) as other:
            refused = await other.call(run_id=run_id, wait=5)
            assert refused.is_error and "names no run you can reach" in text_of(refused)
        async with connect(url, mode="auto", token=TOKEN) as holder:  # the token is another principal too
            assert (await holder.call(run_id=run_id)).is_error
        async with connect(url, mode="legacy", token=alice) as again:  # alice, in a new MCP session
            fetched = await again.call(run_id=run_id, wait=60)
    assert text_of(fetched) == ANSWER
    assert spent_calls(store_url, "alice") == 2, "the root call and its sub-call, under alice"
    assert spent_calls(store_url, "bob") == 0


@pytest.mark.slow
async def test_a_key_over_budget_gets_an_error_result_with_its_budget_and_a_revoked_key_the_401(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, store_url: str, keys: KeyStore
) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    spent, gone = keys.add("spent", 0.01, "month"), keys.add("gone")
    keys.settle("spent", keys.hold("spent", 0.01), "root-model", 1000, 10, 0.01, False)
    keys.revoke("gone")
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--store", store_url, *PRICES) as (_process, url):
        async with connect(url, mode="legacy", token=spent) as client:
            refused = await client.call(query="magic?", paths=["docs/a.md"])
        assert refused.is_error
        message = text_of(refused)
        assert "insufficient_quota: key 'spent' has spent $0.0100 of its budget of $0.01/month" in message
        assert "the budget resets at " in message and message.rstrip().endswith("-01T00:00:00Z")
        assert fake_server.counters.requests == 0
        answer = httpx.post(
            url, headers={"Authorization": f"Bearer {gone}", "Accept": "application/json, text/event-stream"}, json={}
        )
        assert answer.status_code == 401 and answer.json()["error"] == "unauthorized"
