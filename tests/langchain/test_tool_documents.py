"""RLMTool over a folder of PDFs: the answer cites the page and its line, in the text and the artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.documents import CONVERSIONS
from rlm_adapters.files import load_paths
from rlm_adapters.langchain import ChatRLM, RLMTool
from rlm_adapters.langchain._results import result_metadata
from rlm_adapters.sources import SourceTracker
from tests.documents import writers

# The root model's code prints page 7 of q3.pdf, selected by the metadata the converter recorded, then answers.
READ_PAGE_SEVEN = """```repl
report = next(d for d in context if d["metadata"]["path"] == "reports/q3.pdf")
start, end = report["metadata"]["pages"][6]
print(report["text"][start:end])
```"""
ROOT = [READ_PAGE_SEVEN, f"FINAL({writers.SECRET!r})"]
PAGE_SEVEN_LINE_FOUR = {"kind": "page", "start": "7", "end": None, "line_start": 4, "line_end": 4}


@pytest.fixture(autouse=True)
def _fresh_conversions() -> None:
    """Each test converts from nothing (the cache lives as long as the process)."""
    CONVERSIONS.clear()


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """Two quarterly PDFs under ``reports/``; page 7 of q3 holds the secret on its line 4."""
    (tmp_path / "reports").mkdir()
    writers.pdf(tmp_path / "reports" / "q3.pdf")
    writers.pdf(tmp_path / "reports" / "q2.pdf", secret_page=None)
    return tmp_path


def _tool(root: Path) -> RLMTool:
    return RLMTool(llm=ChatRLM(backend=ScriptedModel(ROOT, model_name="root"), environment="local"), roots=[root])


def test_rlm_tool_cites_the_page_and_the_line_inside_it(reports: Path) -> None:
    args = {"query": "combination?", "paths": ["reports"]}
    call = {"name": "rlm_query", "args": args, "id": "c1", "type": "tool_call"}
    message = _tool(reports).invoke(call)
    assert isinstance(message, ToolMessage)
    assert str(message.content) == f"{writers.SECRET}\n\nSources:\n- reports/q3.pdf:p7:L4"
    (source,) = message.artifact["sources"]
    assert (source["path"], source["place"]) == ("reports/q3.pdf", PAGE_SEVEN_LINE_FOUR)


async def test_chat_rlm_response_metadata_carries_the_line_inside_the_page(reports: Path) -> None:
    # ChatRLM's context is its conversation, so a page comes from a context of loaded documents: the same
    # result, cited by the same tracker, in the metadata ChatRLM builds for its messages.
    context = load_paths(["reports"], [reports]).documents()
    tracker = SourceTracker(context)
    rlm = RLM(backend=ScriptedModel(ROOT, model_name="root"), environment="local")
    tracker.start()
    result = await tracker.apply(await rlm.acompletion(context, "combination?", callbacks=[tracker.on_event]))
    _, metadata = result_metadata(result, "root")
    sources: list[dict[str, Any]] = metadata["sources"]
    assert [(s["path"], s["place"]) for s in sources] == [("reports/q3.pdf", PAGE_SEVEN_LINE_FOUR)]
