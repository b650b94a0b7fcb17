"""Issue 35, item 5: settings missing from the cache key.

The key dropped every setting whose name held "key" at any depth (a schema property ``keywords``, a tool
parameter ``primary_key``), every header and the endpoint's query string: 4 of 4 pairs of different requests got
the first one's reply with no request sent. Each pair now gets two keys, through the real openai SDK against a
local server; credentials stay out of the key and out of the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.lm import client_identity, make_client
from rlm_adapters.testing import FakeOpenAIServer

SECRETS = ("sk-planted-first-4d1c", "sk-planted-second-9e2a", "pk-virtual-planted-77", "Bearer planted-auth-5b")


def schema(name: str, kind: str) -> dict[str, Any]:
    properties = {name: {"type": kind}}
    return {
        "type": "json_schema",
        "json_schema": {"name": "out", "schema": {"type": "object", "properties": properties}},
    }


def tool(name: str, kind: str) -> list[dict[str, Any]]:
    parameters = {"type": "object", "properties": {name: {"type": kind}}}
    return [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}]


PAIRS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "schema property keywords": (
        {"response_format": schema("keywords", "string")},
        {"response_format": schema("keywords", "array")},
    ),
    "tool parameter primary_key": ({"tools": tool("primary_key", "string")}, {"tools": tool("primary_key", "integer")}),
    "header x-portkey-provider": (
        {"default_headers": {"x-portkey-provider": "openai"}},
        {"default_headers": {"x-portkey-provider": "anthropic"}},
    ),
    "request header": ({"extra_headers": {"x-route": "a"}}, {"extra_headers": {"x-route": "b"}}),
}


def run(server: FakeOpenAIServer, cache: Path, backend: str = "openai", **settings: Any) -> dict[str, Any]:
    kwargs = {"model_name": "root-model", "base_url": server.base_url, "api_key": SECRETS[0], "max_retries": 0}
    if backend == "azure_openai":
        kwargs = {"model_name": "dep", "azure_endpoint": server.url, "api_key": SECRETS[0], "max_retries": 0}
    rlm = RLM(backend=backend, backend_kwargs={**kwargs, **settings}, environment="local", cache=cache)
    try:
        result = rlm.completion("a context", "a question")
    finally:
        rlm.close()
    assert result.response == "done"
    usage: dict[str, Any] = result.usage_summary.to_dict()["total"]
    return usage


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer(root=["FINAL(done)"]) as running:
        yield running


@pytest.mark.parametrize("pair", list(PAIRS))
def test_two_requests_that_differ_in_one_setting_get_two_keys(
    server: FakeOpenAIServer, tmp_path: Path, pair: str
) -> None:
    first, second = PAIRS[pair]
    cache = tmp_path / "calls.sqlite"
    assert run(server, cache, **first).get("cached_calls", 0) == 0
    sent = server.counters.requests
    assert run(server, cache, **first)["cached_calls"] == 1 and server.counters.requests == sent  # a replay
    assert run(server, cache, **second).get("cached_calls", 0) == 0  # another request: sent, not replayed
    assert server.counters.requests == sent + 1


def test_azure_api_versions_are_two_keys(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """The SDK sends ``?api-version=``: another version is another API, so another reply."""
    cache = tmp_path / "calls.sqlite"
    assert run(server, cache, "azure_openai", api_version="2024-10-21").get("cached_calls", 0) == 0
    assert run(server, cache, "azure_openai", api_version="2024-10-21")["cached_calls"] == 1
    assert run(server, cache, "azure_openai", api_version="2025-04-01-preview").get("cached_calls", 0) == 0


def identity(**settings: Any) -> dict[str, Any]:
    return client_identity(make_client("openai", {"model_name": "m", "api_key": SECRETS[0], **settings}))


def test_the_query_string_of_an_endpoint_is_part_of_its_identity_but_a_key_in_it_is_not() -> None:
    base = "https://gateway.example.invalid/v1"
    older, newer = identity(base_url=f"{base}?api-version=2024-10-21"), identity(base_url=f"{base}?api-version=2025")
    assert older != newer and older != identity(base_url=base)
    with_key = identity(base_url=f"{base}?api-version=2024-10-21&key={SECRETS[1]}")
    assert with_key == older  # ?key= is a credential, left out as api_key is
    assert SECRETS[1] not in json.dumps(with_key)
    password = identity(base_url=f"https://user:{SECRETS[1]}@gateway.example.invalid/v1")
    assert password == identity(base_url=base) and SECRETS[1] not in json.dumps(password)


def test_every_setting_at_any_depth_is_hashed_and_nothing_secret_is_kept_in_clear() -> None:
    one = identity(extra_body={"provider": {"order": ["a"]}, "keywords": ["x"], "password": SECRETS[1]})
    assert one != identity(extra_body={"provider": {"order": ["a"]}, "keywords": ["y"], "password": SECRETS[1]})
    assert one != identity(extra_body={"provider": {"order": ["a"]}, "keywords": ["x"], "password": "other"})
    virtual = identity(default_headers={"x-portkey-virtual-key": SECRETS[2], "Authorization": SECRETS[3]})
    assert virtual != identity(default_headers={"x-portkey-virtual-key": "another", "Authorization": SECRETS[3]})
    # An Authorization header is the api_key by another name: left out, as the key is.
    assert virtual == identity(default_headers={"x-portkey-virtual-key": SECRETS[2], "authorization": "other"})
    for text in (json.dumps(one), json.dumps(virtual)):
        assert not any(secret in text for secret in SECRETS)


def test_another_api_key_replays_and_the_file_holds_no_secret(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """A new key is not a new identity (see `CREDENTIALS` in core/lm/reply_identity.py): the cache is one user's, who
    holds both keys, and a resume after a key rotation must not pay for every call again."""
    cache = tmp_path / "calls.sqlite"
    headers = {"default_headers": {"x-portkey-virtual-key": SECRETS[2], "Authorization": SECRETS[3]}}
    assert run(server, cache, **headers).get("cached_calls", 0) == 0
    assert run(server, cache, api_key=SECRETS[1], **headers)["cached_calls"] == 1
    stored = b"".join(path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith("calls.sqlite"))
    assert b"FINAL(done)" in stored  # the reply is there: the search below reads the real bytes
    for secret in SECRETS:
        assert secret.encode() not in stored
