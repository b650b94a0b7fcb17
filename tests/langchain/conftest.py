"""Fixtures for the LangChain adapter: no network but 127.0.0.1, and root policies that play an RLM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import pytest_socket

from rlm_adapters.testing import FakeOpenAIServer
from tests.langchain.policies import standard_root


@pytest.fixture(autouse=True)
def _no_network() -> None:
    """As LangChain's partner packages do: sockets only to 127.0.0.1 (the fake server) and Unix sockets.

    pytest-socket lifts the restriction itself after each test.
    """
    pytest_socket.socket_allow_hosts(["127.0.0.1"], allow_unix_socket=True)


@pytest.fixture
def lc_server() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI-compatible server playing `standard_root`."""
    with FakeOpenAIServer(root=standard_root) as server:
        yield server


@pytest.fixture
def chat_options(lc_server: FakeOpenAIServer) -> dict[str, Any]:
    """ChatRLM keyword arguments for the fake server, in the local sandbox (fast)."""
    return {
        "model": "root-model",
        "base_url": lc_server.base_url,
        "api_key": "test-key",
        "max_retries": 0,
        "environment": "local",
    }
