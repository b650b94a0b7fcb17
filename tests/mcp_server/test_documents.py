"""rlm_query over a folder of documents: converted behind the walls, counted in progress, cited by page."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.types import TextContent

from rlm_adapters.documents import CONVERSIONS
from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.documents import writers
from tests.mcp_server.conftest import MakeConfig
from tests.mcp_server.test_progress import Recorder


@pytest.fixture(autouse=True)
def _fresh_conversions() -> None:
    """Each test converts from nothing (the cache lives as long as the process, like a server's)."""
    CONVERSIONS.clear()


# The root model reads the page its code selects by the document's metadata, then answers from it.
READ_PAGE_SEVEN = """```repl
report = next(d for d in context if d["metadata"]["path"] == "reports/q3.pdf")
start, end = report["metadata"]["pages"][6]
print(report["text"][start:end])
```"""


def reports(workspace: Path, fake_server: FakeOpenAIServer) -> None:
    """Three quarterly PDFs (page 7 of q3 holds the secret), and a root model that reads that page and answers."""
    (workspace / "reports").mkdir()
    writers.pdf(workspace / "reports" / "q3.pdf")
    writers.pdf(workspace / "reports" / "q2.pdf", secret_page=None)
    writers.pdf(workspace / "reports" / "q1.pdf", pages=2, secret_page=None)
    fake_server.root = scripted_root([READ_PAGE_SEVEN, f"FINAL({writers.SECRET!r})"])


async def test_documents_are_converted_with_progress_and_read_by_page(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path
) -> None:
    reports(workspace, fake_server)
    recorder = Recorder()
    async with Client(build_server(make_config())) as client:
        arguments = {"detail": "full", "query": "What is the vault combination?", "paths": ["reports"]}
        result = await client.call_tool("rlm_query", arguments, progress_callback=recorder)
    output = result.structured_content
    assert output is not None and output["answer"] == writers.SECRET, output
    assert sorted(f["path"] for f in output["detail"]["files_read"]) == [
        "reports/q1.pdf",
        "reports/q2.pdf",
        "reports/q3.pdf",
    ]
    assert output["detail"]["files_skipped"] == []
    converting = [m for m in recorder.messages if m.startswith("converting")]
    assert converting == [f"converting {n}/3 PDFs · iteration 0/30 · $0.00" for n in range(4)]
    assert "starting · iteration 0/30 · $0.00 · reading 3 files" in recorder.messages
    # What the root model's code printed is page 7 of the PDF, headed as the converter heads each page.
    roots = [r for r in fake_server.requests_log if r.get("model") == "root-model"]
    second_prompt = str(roots[1]["messages"][-1]["content"])
    assert "[page 7]" in second_prompt and "8812-BRAVO" in second_prompt


async def test_a_second_question_over_the_same_folder_converts_nothing(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writers.pdf(workspace / "q3.pdf")
    writers.xlsx(workspace / "book.xlsx")
    runs = writers.count_conversions(monkeypatch)
    fake_server.root = scripted_root(["FINAL(seen)"])
    server = build_server(make_config())
    async with Client(server) as client:
        for _ in range(2):
            result = await client.call_tool(
                "rlm_query", {"detail": "full", "query": "q", "paths": ["q3.pdf", "book.xlsx"]}
            )
            assert result.structured_content is not None
            assert sorted(f["path"] for f in result.structured_content["detail"]["files_read"]) == [
                "book.xlsx",
                "q3.pdf",
            ]
    assert len(runs) == 2  # the first call's two conversions; the second call's came from the cache


async def test_the_answer_cites_the_page_in_sources_and_the_sources_block(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path
) -> None:
    reports(workspace, fake_server)
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool(
            "rlm_query", {"query": "What is the vault combination?", "paths": ["reports"], "detail": "full"}
        )
    output = result.structured_content
    assert output is not None and output["answer"] == writers.SECRET, output
    assert output["sources"] == ["reports/q3.pdf:p7:L4"]
    cited = [(source["path"], source["place"]) for source in output["detail"]["sources"]]
    page = {"kind": "page", "start": "7", "end": None, "line_start": writers.PLANTED_LINE, "line_end": 4}
    assert cited == [("reports/q3.pdf", page)], output["sources"]
    text = result.content[0]
    assert isinstance(text, TextContent) and "\n- reports/q3.pdf:p7:L4\n" in text.text + "\n"


async def test_text_that_is_a_files_raw_bytes_is_refused_before_any_model_call(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path
) -> None:
    """Issue 36: a client that read an .xlsx as text gets told to pass the file in ``paths``."""
    writers.xlsx(workspace / "book.xlsx")
    raw = (workspace / "book.xlsx").read_bytes().decode("utf-8", errors="replace")
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": raw})
    assert result.is_error
    message = result.content[0].text  # type: ignore[union-attr]
    assert "`text` is the raw bytes of a ZIP archive" in message and "give the file in `paths`" in message
    assert fake_server.counters.requests == 0
