"""Shared fixtures: the local OpenAI-compatible server, scripted models, a clean environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlm_adapters.core.lm.limiter import forget_learned_limits
from rlm_adapters.testing import FakeOpenAIServer


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    """A real OpenAI-compatible HTTP server on 127.0.0.1 (tests set `.root`, `.leaf`, `.latency`)."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def openai_options(fake_server: FakeOpenAIServer) -> dict[str, object]:
    """RLM keyword arguments pointing the root and sub model at the fake server."""
    url = fake_server.base_url
    return {
        "backend": "openai",
        "backend_kwargs": {
            "model_name": "root-model",
            "base_url": url,
            "api_key": "test-key",
            "max_retries": 0,
        },
        "other_backends": ["openai"],
        "other_backend_kwargs": [
            {"model_name": "leaf-model", "base_url": url, "api_key": "test-key", "max_retries": 0}
        ],
    }


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see real provider settings from the machine they run on."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "RLM_MODEL",
        "RLM_SUB_MODEL",
        "RLM_BACKEND",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _fresh_concurrency_limits() -> None:
    """Each test's fake server is a new endpoint: no limit learnt by an earlier test carries over."""
    forget_learned_limits()
