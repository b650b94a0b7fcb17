"""Keys and budgets on `rlm serve --store postgresql://...` (issue 52): real replicas, a real store, the real SDK."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import psycopg
import pytest

from rlm_adapters.core.cache import KeyStore, PostgresStore
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.testing.fake_openai import Answer, Response
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer
from tests.postgres import PASSWORD, PostgresServer
from tests.serve.test_shutdown import ServeProcess

# Dollars per million tokens: a root call (its prompt about 2,000 tokens) costs about $0.02 at these prices.
ROOT_PRICE, LEAF_PRICE = (10.0, 40.0), (2.0, 8.0)
PRICES = ("--price", "root-model=10.0,40.0", "--price", "leaf-model=2.0,8.0")  # as ROOT_PRICE, LEAF_PRICE


class PricedLedger(LedgerServer):
    """The ledger server, also keeping each answered call's price at `PRICES` (to bound one call's price)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prices: list[float] = []
        self._lock = threading.Lock()

    async def answer(
        self, model: str, messages: list[dict[str, Any]], options: dict[str, Any] | None = None
    ) -> Answer | Response:
        result = await super().answer(model, messages, options)
        if isinstance(result, Answer):
            rate = ROOT_PRICE if model == "root-model" else LEAF_PRICE
            price = (result.prompt_tokens * rate[0] + result.completion_tokens * rate[1]) / 1e6
            with self._lock:
                self.prices.append(price)
        return result


class GuardedServe(ServeProcess):
    """`rlm serve` behind a token: ready once it answers at all (its 401 to a request without the token)."""

    READY = 401


def _token_file(folder: Path) -> Path:
    """The server's token, in a file only this user reads (as --token-file asks)."""
    token = folder / "token"
    token.write_text("the-server-token")
    token.chmod(0o600)
    return token


def _client(replica: ServeProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=replica.base_url, api_key=key, max_retries=0, timeout=120)


def _ask(replica: ServeProcess, key: str, text: str = "the first document. Add up the magic numbers.") -> Any:
    return _client(replica, key).chat.completions.create(
        model="test",
        messages=[{"role": "user", "content": text}],  # type: ignore[list-item]
    )


def _spend(store_url: str, name: str) -> tuple[float, int, int]:
    """Dollars, calls and cut calls key `name` spent (all days, all models)."""
    with psycopg.connect(store_url) as connection:
        row = connection.execute(
            "SELECT coalesce(sum(dollars), 0), coalesce(sum(calls), 0), coalesce(sum(cut_calls), 0) "
            "FROM rlm_key_spend WHERE key_name = %s",
            (name,),
        ).fetchone()
    assert row is not None
    return float(row[0]), int(row[1]), int(row[2])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_key_is_its_own_principal_beside_the_token_and_a_revoked_or_unknown_one_gets_the_401(
    store_url: str, keys: KeyStore, tmp_path: Any
) -> None:
    alice = keys.add("alice")
    narrow = keys.add("narrow", models=["other"])
    token = _token_file(tmp_path)
    with LedgerServer(root=BATCHES) as upstream:
        replica = GuardedServe(upstream, "--store", store_url, "--token-file", str(token), *PRICES)
        try:
            assert _ask(replica, alice).choices[0].message.content == BATCHES_ANSWER
            assert _spend(store_url, "alice")[1] == 15, "each of the run's 15 calls is recorded under its key"
            # The server's one token keeps working, and spends under no key.
            assert _ask(replica, "the-server-token", "another document").choices[0].message.content
            with pytest.raises(openai.PermissionDeniedError) as refused:
                _ask(replica, narrow)
            assert refused.value.status_code == 403
            assert refused.value.code == "model_not_allowed"
            assert "'narrow' may not use the model 'test'; it may use other" in refused.value.message
            keys.revoke("alice")
            revoked = time.monotonic()
            while True:  # a replica remembers a key it found for 2 s: the revocation is seen within that bound
                try:
                    _ask(replica, alice, "after the revocation")
                except openai.AuthenticationError:
                    break
                assert time.monotonic() - revoked < 2.5, "the revoked key was still served after 2 s"
            for secret in (alice, "rlmk_" + "x" * 43, "not-a-key"):
                with pytest.raises(openai.AuthenticationError) as denied:
                    _ask(replica, secret)
                assert denied.value.status_code == 401
                assert denied.value.code == "invalid_api_key"
        finally:
            replica.kill()
    assert not [line for line in replica.lines if PASSWORD in line or alice in line]


@pytest.mark.timeout(300)
def test_on_loopback_without_a_token_a_key_still_pays_and_a_revoked_key_is_refused(
    store_url: str, keys: KeyStore
) -> None:
    bob, carol = keys.add("bob"), keys.add("carol")
    keys.revoke("carol")
    with LedgerServer(root=BATCHES) as upstream:
        replica = ServeProcess(upstream, "--store", store_url, *PRICES)
        try:
            assert _ask(replica, "anything").choices[0].message.content == BATCHES_ANSWER  # as before: no key
            assert _ask(replica, bob, "another").choices[0].message.content == BATCHES_ANSWER
            assert _spend(store_url, "bob")[1] == 15
            with pytest.raises(openai.AuthenticationError):
                _ask(replica, carol, "a third")
            assert _spend(store_url, "carol")[1] == 0
        finally:
            replica.kill()


@pytest.mark.timeout(300)
def test_a_key_over_its_budget_gets_openai_s_429_insufficient_quota_with_the_budget_and_its_reset(
    store_url: str, keys: KeyStore
) -> None:
    spent = keys.add("spent", 0.05, "day")
    poor = keys.add("poor", 0.000001, "month")  # less than any one call: its first call is refused
    hold = keys.hold("spent", 0.05)
    keys.settle("spent", hold, "root-model", 1000, 100, 0.05, False)
    with LedgerServer(root=BATCHES) as upstream:
        replica = ServeProcess(upstream, "--store", store_url, *PRICES)
        try:
            with pytest.raises(openai.RateLimitError) as streamed:  # refused before the stream starts
                _client(replica, spent).chat.completions.create(
                    model="test", messages=[{"role": "user", "content": "hi"}], stream=True
                )
            assert streamed.value.code == "insufficient_quota"
            with pytest.raises(openai.RateLimitError) as over:
                _ask(replica, spent)
            assert over.value.status_code == 429
            assert over.value.code == "insufficient_quota"
            assert over.value.type == "rate_limit_error"
            standing = keys.standings("spent")[0]
            assert "key 'spent' has spent $0.0500 of its budget of $0.05/day; the budget resets at " in (
                over.value.message
            )
            assert standing.reset_words() in over.value.message and standing.reset_words().endswith("T00:00:00Z")
            with pytest.raises(openai.RateLimitError) as poorer:
                _ask(replica, poor)
            assert poorer.value.code == "insufficient_quota"
            assert "budget of $0.00/month" in poorer.value.message and "the next call may cost" in poorer.value.message
            assert upstream.arrived == [], "no call was paid for a key that could not afford one"
        finally:
            replica.kill()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_budget_holds_across_two_replicas_under_concurrent_runs(store_url: str, keys: KeyStore) -> None:
    """Twenty-four runs at once, split over two replicas, on one key whose budget pays for about two thirds of
    them: the store's spend never passes the budget by more than one call's price."""
    budget = 0.50
    team = keys.add("team", budget, "day")
    with PricedLedger(root=BATCHES, latency=0.05) as upstream:
        replicas = [
            ServeProcess(upstream, "--store", store_url, "--max-runs", "12", "--max-waiting", "12", *PRICES)
            for _ in range(2)
        ]
        try:

            def one(number: int) -> str:
                try:
                    reply = _ask(replicas[number % 2], team, f"document {number}. Add up the magic numbers.")
                    return str(reply.choices[0].finish_reason)
                except openai.RateLimitError as exc:
                    assert exc.code == "insufficient_quota"
                    return "429"

            with ThreadPoolExecutor(24) as pool:
                outcomes = list(pool.map(one, range(24)))
        finally:
            for replica in replicas:
                replica.kill()
    dollars, calls, _cut = _spend(store_url, "team")
    one_call = max(upstream.prices)
    overspend = dollars - budget
    print(
        f"\nbudget ${budget:.4f}: spent ${dollars:.4f} in {calls} calls over {len(outcomes)} runs "
        f"({sorted(outcomes)}); worst overspend ${max(overspend, 0):.6f} = {max(overspend, 0) / one_call:.3f} "
        f"of the dearest call (${one_call:.4f})"
    )
    assert calls == len(upstream.prices), "every call the fake server answered is in the store under the key"
    assert abs(dollars - sum(upstream.prices)) < 1e-6, "the store's spend is the calls' price at --price"
    assert dollars <= budget + one_call
    assert dollars > budget / 2, "the budget was used, not refused from the start"
    assert "length" in outcomes or "429" in outcomes, "some runs stopped at the key's budget"
    with psycopg.connect(store_url) as connection:
        held = connection.execute("SELECT count(*) FROM rlm_key_holds").fetchone()
    assert held == (0,), "every hold was settled or released"


@pytest.mark.timeout(300)
def test_a_call_cut_when_its_client_leaves_is_recorded_as_a_cut_call(store_url: str, keys: KeyStore) -> None:
    cutter = keys.add("cutter", 5.0, "week")
    with LedgerServer(root=BATCHES) as upstream:
        replica = ServeProcess(upstream, "--store", store_url, *PRICES)
        try:
            upstream.latency = 30.0  # the root call is in flight when the client leaves
            arrived = upstream.watch(lambda request: True)
            body = json.dumps({"model": "test", "messages": [{"role": "user", "content": "cut me"}]}).encode()
            head = (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{replica.port}\r\n"
                f"Authorization: Bearer {cutter}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            with socket.create_connection(("127.0.0.1", replica.port)) as connection:
                connection.sendall(head.encode() + body)
                assert arrived.wait(60), "the run's root call reached the model"
            # The client has gone with its call in flight: the run stops and the call is cut.
            replica.line_with("chat.completions")
            dollars, calls, cut = 0.0, 0, 0
            for _ in range(200):  # the run stops, its cut call settles: within a moment of the client leaving
                dollars, calls, cut = _spend(store_url, "cutter")
                if cut:
                    break
                threading.Event().wait(0.05)
            assert (calls, cut) == (1, 1)
            assert dollars > 0, "the cut call's input is billed"
        finally:
            replica.kill()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_store_gone_mid_service_answers_a_key_503_and_the_token_holder_is_still_served(tmp_path: Any) -> None:
    """The keys cannot be checked: a key's request is refused in one line (503 store_unavailable, no password),
    never served unpaid; the server's token needs no store and its run goes on uncached."""
    server = PostgresServer()
    try:
        server.start()
        url = server.create_database("gone")
        database = PostgresStore(url)
        secret = KeyStore(database).add("alice", 1.0, "day")
        database.close()
        token = _token_file(tmp_path)
        with LedgerServer(root=BATCHES) as upstream:
            replica = GuardedServe(upstream, "--store", url, "--token-file", str(token), *PRICES)
            try:
                server.stop()
                with pytest.raises(openai.InternalServerError) as unavailable:
                    _ask(replica, secret)
                assert unavailable.value.status_code == 503 and unavailable.value.code == "store_unavailable"
                message = unavailable.value.message
                assert (
                    "the keys cannot be checked: the store postgresql://" in message and "cannot be reached" in message
                )
                assert upstream.arrived == [], "no call is paid for a key whose budget cannot be checked"
                assert _ask(replica, "the-server-token").choices[0].message.content == BATCHES_ANSWER
            finally:
                replica.kill()
        assert not [line for line in replica.lines if PASSWORD in line]
    finally:
        server.remove()


async def test_off_loopback_a_store_s_keys_are_the_guard_a_request_without_one_gets_the_401(
    store_url: str, keys: KeyStore
) -> None:
    from rlm_adapters.serve.app import Guard, ServeConfig
    from rlm_adapters.serve.served_models import default_model

    secret = keys.add("remote")
    model = default_model({"RLM_MODEL": "gpt-5-mini"})
    with pytest.raises(ConfigurationError, match="is not loopback: set a token"):
        ServeConfig([model], host="0.0.0.0")
    config = ServeConfig([model], host="0.0.0.0", keys=keys)  # the keys guard it
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["rlm_adapters.key"].name)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    transport = httpx.ASGITransport(app=Guard(app, config))
    async with httpx.AsyncClient(transport=transport, base_url="http://rlm.example") as client:
        for header in ({}, {"authorization": "Bearer anything"}, {"authorization": "Bearer rlmk_unknown"}):
            refused = await client.get("/v1/models", headers=header)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
        passed = await client.get("/v1/models", headers={"authorization": f"Bearer {secret}"})
    assert passed.status_code == 204 and reached == ["remote"]
