"""What a client says decides its replies (`cache_identity`): settings that change the output, never a secret."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from rlm_adapters.core.lm import ScriptedModel, client_identity, make_client
from rlm_adapters.core.lm.reply_identity import is_secret_name, public_endpoint, settings_identity

from .extras import needs_boto3, needs_genai, needs_litellm

KEY, HEADER, TOKEN = "sk-planted-0b5e1f", "Bearer planted-header", "planted-session-token"


def identity(backend: str, **kwargs: Any) -> str:
    return json.dumps(client_identity(make_client(backend, kwargs)), sort_keys=True)


def assert_no_secret(text: str) -> None:
    for planted in (KEY, HEADER, TOKEN):
        assert planted not in text


@pytest.mark.parametrize(
    ("backend", "base"),
    [
        pytest.param("openai", {"model_name": "m", "base_url": "http://127.0.0.1:9/v1"}, id="openai"),
        pytest.param("vllm", {"model_name": "m", "base_url": "http://127.0.0.1:9/v1"}, id="vllm"),
        pytest.param("anthropic", {"model_name": "m", "base_url": "http://127.0.0.1:9"}, id="anthropic"),
        pytest.param(
            "litellm",
            {"model_name": "openai/m", "api_base": "http://127.0.0.1:9/v1"},
            id="litellm",
            marks=needs_litellm,
        ),
    ],
)
def test_a_key_a_header_or_a_timeout_changes_nothing_and_a_reply_setting_does(
    backend: str, base: dict[str, Any]
) -> None:
    # A credential header is the key by another name: left out as the key is (other headers decide replies).
    headers = (
        {"default_headers": {"Authorization": HEADER}}
        if backend != "litellm"
        else {"extra_headers": {"Authorization": HEADER}}
    )
    with_secrets = identity(backend, **base, api_key=KEY, timeout=7, max_retries=2, **headers)
    assert_no_secret(with_secrets)
    assert with_secrets == identity(backend, **base, api_key="another-key")
    assert identity(backend, **base, api_key=KEY, max_tokens=77) != identity(backend, **base, api_key=KEY)
    moved = {**base, "base_url" if "base_url" in base else "api_base": "http://127.0.0.1:10/v1"}
    assert identity(backend, **moved, api_key=KEY) != identity(backend, **base, api_key=KEY)
    assert identity(backend, **{**base, "model_name": base["model_name"] + "-2"}, api_key=KEY) != with_secrets


@needs_boto3
def test_bedrock_is_known_by_its_region_not_its_credentials() -> None:
    base = {"model_name": "amazon.nova-pro-v1:0", "aws_access_key_id": "AKIAPLANTED", "aws_secret_access_key": KEY}
    east = identity("bedrock", region_name="us-east-1", aws_session_token=TOKEN, **base)
    assert_no_secret(east)
    assert "AKIAPLANTED" not in east
    assert east != identity("bedrock", region_name="eu-west-1", **base)
    assert identity("bedrock", region_name="us-east-1", max_tokens=100, **base) != east


@needs_genai
def test_gemini_is_known_by_its_generation_settings() -> None:
    plain = identity("gemini", model_name="gemini-2.5-flash", api_key=KEY)
    assert_no_secret(plain)
    assert identity("gemini", model_name="gemini-2.5-flash", api_key=KEY, temperature=0.5) != plain


def test_a_scripted_model_or_a_users_client_is_known_by_name_and_class() -> None:
    assert client_identity(ScriptedModel(["x"], model_name="a")) == {"backend": "scripted", "model": "a"}

    class Mine:
        model_name = "mine"
        endpoint = "https://user:secret@example.invalid/v1?key=planted"

        async def acomplete(self, messages: Any) -> Any: ...

        async def aclose(self) -> None: ...

    found = client_identity(Mine())
    assert found["model"] == "mine" and found["client"].endswith("Mine")
    assert found["endpoint"] == "https://example.invalid/v1"  # no user, password or query string


class Format(BaseModel):
    answer: str


def test_settings_leave_credentials_out_digest_secret_names_and_keep_what_decides_a_reply() -> None:
    settings = {
        "temperature": 0,
        "max_tokens": 50,
        "top_k": 3,
        "response_format": Format,
        "extra_body": {"provider": {"order": ["x"]}, "api_key": KEY, "nested": [{"password": TOKEN}]},
        "http_client": object(),
        "azure_ad_token": TOKEN,
        "tools": [{"name": "f", "input_schema": Format.model_json_schema()}],
    }
    cleaned = settings_identity(settings)
    assert_no_secret(json.dumps(cleaned))
    assert cleaned["extra_body"]["api_key"].startswith("sha256:")  # nested: digested, not dropped
    assert "azure_ad_token" not in cleaned  # a credential by its exact name: left out
    assert cleaned["temperature"] == 0 and cleaned["max_tokens"] == 50 and cleaned["top_k"] == 3
    assert cleaned["response_format"].endswith("Format>") and cleaned["tools"][0]["name"] == "f"
    assert "http_client" not in cleaned and cleaned["extra_body"]["provider"] == {"order": ["x"]}
    assert "0x" not in json.dumps(cleaned)  # no memory address: it changes from process to process


@pytest.mark.parametrize(
    ("name", "secret"),
    [("api_key", True), ("x-api-key", True), ("aws_session_token", True), ("Authorization", True),
     ("client_secret", True), ("max_tokens", False), ("max_completion_tokens", False), ("top_k", False),
     ("temperature", False), ("stop_sequences", False)],
)  # fmt: skip
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_public_endpoint_keeps_host_and_path_only() -> None:
    assert public_endpoint("http://u:p@h:1/v1/?api-key=z") == "http://h:1/v1"
    assert public_endpoint("bedrock-runtime.us-east-1") == "bedrock-runtime.us-east-1"
