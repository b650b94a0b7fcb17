"""rlm_query returns the answer with the sources finished within its bound, and says what was not (issue 47).

``rlm_query`` over a 5 MB one-line file once took 36 s, model work under 1 s, its progress frozen at
"iteration 3/30" for 30 s while the sources were found. The server's ``--sources-timeout`` bounds that phase,
its progress says "finding sources" while it happens, and a result cut there says so in its own key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from mcp import Client

from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from tests.held_sources import ANSWER, FIND, TEXT, held_claims
from tests.mcp_server.conftest import MakeConfig


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    with held_claims(monkeypatch) as opened:
        yield opened


async def test_rlm_query_returns_the_answer_with_the_sources_finished_in_time_and_says_what_was_not(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, gate: threading.Event
) -> None:
    fake_server.root = [FIND, f"FINAL({ANSWER})"]
    messages: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(build_server(make_config(sources_timeout=0.3))) as client:
        result = await client.call_tool("rlm_query", {"query": "the code?", "text": TEXT}, progress_callback=progress)
    assert result.structured_content is not None and not result.is_error
    content = result.structured_content
    assert content["answer"] == ANSWER and content["sources"] == ["text:201"]
    assert "unsupported" not in content  # none found, because none were checked: which the next key says
    assert content["sources_unfinished"] == (
        "sources not finished, cut at 0.3 s (sources_timeout): the claims were not checked"
    )
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.endswith("(sources not finished, cut at 0.3 s (sources_timeout): the claims were not checked)")
    assert any(message.startswith("finding sources") for message in messages)
