"""One store of conversions for every face: what `rlm ask` (`load_paths`), `rlm-mcp`, `RLMTool` and
`RLMQueryEngine.from_paths` convert, each of the others finds on disk in its next process, converting nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlm_adapters import ScriptedModel
from rlm_adapters.documents import CONVERSIONS, forget_conversions
from rlm_adapters.files import load_paths
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.documents import writers


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "store"
    monkeypatch.setenv("RLM_DOCUMENT_CACHE", str(folder))
    forget_conversions()
    yield folder
    forget_conversions()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    writers.pdf(folder / "q3.pdf")
    writers.xlsx(folder / "book.xlsx")
    return folder


def through_rlm_tool(docs: Path, _: FakeOpenAIServer) -> str:
    from rlm_adapters.langchain import ChatRLM, RLMTool

    code = '```repl\nprint(sum(d["text"].count("8812-BRAVO") for d in context))\n```'
    tool = RLMTool(
        llm=ChatRLM(direct_below_tokens=None, backend=ScriptedModel([code, 'FINAL("read")']), environment="local"),
        roots=[docs],
    )
    message = tool.invoke({"name": "rlm_query", "args": {"query": "q", "paths": ["."]}, "id": "c", "type": "tool_call"})
    return str(message.content)


def through_from_paths(docs: Path, _: FakeOpenAIServer) -> str:
    from rlm_adapters.llama_index import RLMQueryEngine

    engine = RLMQueryEngine.from_paths(
        ["."], roots=[docs], backend=ScriptedModel(['FINAL("read")']), environment="local"
    )
    assert any(writers.SECRET in node.get_content() for node in engine.nodes)
    return str(engine.query("q").response)


def through_rlm_mcp(docs: Path, fake_server: FakeOpenAIServer) -> str:
    import anyio
    from mcp import Client

    from rlm_adapters.mcp_server import ServerConfig, build_server

    fake_server.root = scripted_root(['FINAL("read")'])
    config = ServerConfig(
        roots=[docs],
        model="root-model",
        base_url=fake_server.base_url,
        api_key="test-key",
        sandbox="local",
        log_dir=docs.parent / "logs",
        environ={},
    )

    async def ask() -> str:
        async with Client(build_server(config)) as client:
            result = await client.call_tool("rlm_query", {"query": "q", "paths": ["."], "detail": "full"})
        assert result.structured_content is not None, result
        assert len(result.structured_content["detail"]["files_read"]) == 2
        return str(result.structured_content["answer"])

    return anyio.run(ask)


FACES: dict[str, Callable[[Path, FakeOpenAIServer], str]] = {
    "RLMTool": through_rlm_tool,
    "from_paths": through_from_paths,
    "rlm-mcp": through_rlm_mcp,
}


@pytest.mark.parametrize("face", list(FACES))
def test_a_face_reads_what_another_process_converted_and_keeps_what_it_converts(
    face: str, docs: Path, store: Path, monkeypatch: pytest.MonkeyPatch, fake_server: FakeOpenAIServer
) -> None:
    launched = writers.count_conversions(monkeypatch)
    load_paths([str(docs)], [docs])  # `rlm ask`'s loader, in another process
    assert len(launched) == 2 and len(list(store.glob("*.conv"))) == 2
    forget_conversions()  # a new process: nothing in memory
    assert FACES[face](docs, fake_server).startswith("read")
    assert len(launched) == 2, f"{face} converted again what the store held"
    assert CONVERSIONS.stored_hits == 2
    # And the other way: what the face converts, the next process finds.
    for entry in store.glob("*.conv"):
        entry.unlink()
    forget_conversions()
    FACES[face](docs, fake_server)
    assert len(launched) == 4 and len(list(store.glob("*.conv"))) == 2
    forget_conversions()
    assert load_paths([str(docs)], [docs]).skipped == [] and len(launched) == 4
    assert CONVERSIONS.stored_hits == 2
