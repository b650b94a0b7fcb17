"""What the engine reads of a model client is declared once (`ModelClient`), each backend owns its credential
check, and each cloud sandbox its key (issue 49 item 3)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.engine.model_call import output_bound
from rlm_adapters.core.engine.tree import endpoint_of
from rlm_adapters.core.lm import LMResponse, Message, ModelClient, credentials_problem, declared, make_client
from rlm_adapters.core.lm.base import ChecksCredentials
from rlm_adapters.core.lm.registry import _LAZY
from rlm_adapters.core.sandbox import unset_credential
from rlm_adapters.core.tracing._attributes import provider_name
from rlm_adapters.model_flags import PROVIDER_BACKENDS

ROOT = Path(__file__).resolve().parents[3]


class Bare:
    """A client written against the bare `LMClient` protocol, with some of the optional members."""

    endpoint = "http://127.0.0.1:9/v1"
    max_output_tokens = True  # not a number: ignored, not read as 1

    @property
    def model_name(self) -> str:
        return "bare"

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        return LMResponse("hi", 1, 1, "bare")

    async def aclose(self) -> None:
        return None


def test_a_bare_client_is_read_once_in_the_declared_shape() -> None:
    bare = Bare()
    client = make_client(bare)  # type: ignore[arg-type]
    assert isinstance(client, ModelClient) and client.implementation is bare
    assert (endpoint_of(client), output_bound(client), client.cache_identity()) == (Bare.endpoint, None, None)
    assert provider_name(client) == "bare"
    assert declared(client) is client


def test_every_built_in_client_is_a_model_client_with_the_defaults_it_does_not_override() -> None:
    scripted = make_client("scripted", {"replies": ["x"], "model_name": "s"})
    assert (scripted.endpoint, scripted.max_output_tokens, scripted.backend) == (None, None, "scripted")
    assert endpoint_of(scripted) == "model:s"
    openai_client = make_client("openai", {"model_name": "m", "base_url": "http://127.0.0.1:9/v1"})
    assert (openai_client.backend, openai_client.endpoint) == ("openai", "http://127.0.0.1:9/v1")


@pytest.mark.parametrize("backend", PROVIDER_BACKENDS)
def test_every_backend_a_command_line_can_name_owns_its_credential_check(backend: str) -> None:
    module_name, _, attribute = _LAZY[backend].partition(":")
    factory = getattr(__import__(module_name, fromlist=[attribute]), attribute)
    assert isinstance(factory, ChecksCredentials)


@pytest.mark.parametrize(
    ("backend", "settings", "environ", "expected"),
    [
        ("openai", {}, {}, "OPENAI_API_KEY"),
        ("openai", {"base_url": "http://127.0.0.1:8000/v1"}, {}, None),
        ("vllm", {}, {}, "--base-url"),
        ("openrouter", {}, {}, "OPENROUTER_API_KEY"),
        ("openrouter", {"api_key": "k"}, {}, None),
        ("anthropic", {}, {"ANTHROPIC_API_KEY": "k"}, None),
        ("anthropic", {}, {}, "ANTHROPIC_API_KEY"),
        ("scripted", {}, {}, None),
        ("no-such-backend", {}, {}, None),  # the constructor names an unknown backend
    ],
)
def test_the_backend_says_what_to_set(
    backend: str, settings: Mapping[str, Any], environ: Mapping[str, str], expected: str | None
) -> None:
    problem = credentials_problem(backend, settings, environ)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem and "backend_kwargs" not in problem


def test_checking_credentials_imports_no_sdk() -> None:
    # `rlm-mcp` and `rlm serve` check credentials at start-up: the openai SDK (0.7-1 s) waits for the first call.
    code = (
        "import sys\nfrom rlm_adapters.model_flags import credentials_problem, model_options\n"
        "for b in ('openai', 'azure_openai', 'vllm', 'portkey', 'anthropic', 'gemini'):\n"
        "    credentials_problem(model_options(model='m', backend=b, environ={}), {})\n"
        "print(sorted(m for m in ('openai', 'anthropic', 'google.genai') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.strip() == "[]", done.stderr


def test_a_cloud_sandbox_declares_its_key(tmp_path: Path) -> None:
    assert unset_credential("e2b", {}) == "E2B_API_KEY"
    assert unset_credential("e2b", {"E2B_API_KEY": "k"}) is None
    assert unset_credential("subprocess", {}) is None
    assert unset_credential("modal", {"MODAL_CONFIG_PATH": str(tmp_path / "none.toml")}) == "MODAL_TOKEN_ID"
    profile = tmp_path / "modal.toml"
    profile.write_text("[default]\n")
    assert unset_credential("modal", {"MODAL_CONFIG_PATH": str(profile)}) is None
