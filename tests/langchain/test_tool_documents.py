"""RLMTool over a folder of PDFs: the answer cites the page and its line; conversions are reported as progress."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import ToolMessage

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.sandbox.subprocess import oneshot
from rlm_adapters.documents import CONVERSIONS
from rlm_adapters.files import FileLoadError, load_paths
from rlm_adapters.langchain import ChatRLM, RLMTool
from rlm_adapters.langchain import _rlm_tool as _tool_module
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
    return RLMTool(
        llm=ChatRLM(direct_below_tokens=None, backend=ScriptedModel(ROOT, model_name="root"), environment="local"),
        roots=[root],
    )


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


class SyncProgress(BaseCallbackHandler):
    """A plain LangChain handler: what ``rlm_progress`` custom events it hears, and of which run."""

    def __init__(self) -> None:
        self.heard: list[dict[str, Any]] = []
        self.runs: set[UUID] = set()
        self.tool_runs: set[UUID] = set()

    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, **kwargs: Any) -> None:
        self.tool_runs.add(run_id)

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if name == "rlm_progress":
            self.heard.append(data)
            self.runs.add(run_id)


class AsyncProgress(AsyncCallbackHandler):
    """The async kind of handler, as an async agent's callbacks are."""

    def __init__(self) -> None:
        self.heard: list[dict[str, Any]] = []

    async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == "rlm_progress":
            self.heard.append(data)


def _converting(heard: list[dict[str, Any]]) -> list[str]:
    return [event["text"] for event in heard if event["kind"] == "converting"]


def test_rlm_tool_reports_each_conversion_before_the_run_to_a_sync_handler(reports: Path) -> None:
    writers.pdf(reports / "reports" / "q1.pdf", pages=2, secret_page=None)
    handler = SyncProgress()
    output = _tool(reports).invoke({"query": "combination?", "paths": ["reports"]}, config={"callbacks": [handler]})
    assert str(output).startswith(writers.SECRET)
    assert _converting(handler.heard) == [f"converting {n}/3 PDFs" for n in range(4)]
    kinds = [event["kind"] for event in handler.heard]
    # Every count comes before the run's first event; the run's events follow (the sync path sends them too).
    assert kinds[:4] == ["converting"] * 4 and kinds[4] == "run_start" and kinds[-1] == "final"
    assert handler.heard[1] == {"kind": "converting", "done": 1, "total": 3, "label": "PDFs", "cached": 0,
                                "text": "converting 1/3 PDFs"}  # fmt: skip
    assert handler.runs == handler.tool_runs and len(handler.runs) == 1  # events of the tool's own run


async def test_rlm_tool_reports_each_conversion_to_an_async_handler(reports: Path) -> None:
    handler = AsyncProgress()
    output = await _tool(reports).ainvoke({"query": "q", "paths": ["reports"]}, config={"callbacks": [handler]})
    assert str(output).startswith(writers.SECRET)
    assert _converting(handler.heard) == ["converting 0/2 PDFs", "converting 1/2 PDFs", "converting 2/2 PDFs"]
    assert [event["kind"] for event in handler.heard][3] == "run_start"


async def test_a_text_call_and_a_folder_without_documents_report_no_conversion(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the vault combination is 8812-BRAVO\n")
    handler = AsyncProgress()
    tool = _tool(tmp_path)
    await tool.ainvoke({"query": "q", "paths": ["notes.txt"]}, config={"callbacks": [handler]})
    await tool.ainvoke({"query": "q", "text": "some text"}, config={"callbacks": [handler]})
    assert _converting(handler.heard) == [] and [e["kind"] for e in handler.heard].count("run_start") == 2


async def test_a_cancelled_call_stops_converting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Twelve PDFs; the agent gives up at the first count. The loading thread must stop at its next check
    # instead of converting all twelve for nobody.
    (tmp_path / "reports").mkdir()
    for number in range(12):
        writers.pdf(tmp_path / "reports" / f"r{number}.pdf", pages=1, secret_page=None)
    runs: list[str] = []
    real_run = oneshot.run_walled

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(str(args[2]))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(oneshot, "run_walled", counted)
    ended = threading.Event()
    outcome: list[BaseException | None] = []
    real_load = _tool_module.load_paths

    def load(*args: Any, **kwargs: Any) -> Any:
        try:
            result = real_load(*args, **kwargs)
        except BaseException as exc:
            outcome.append(exc)
            raise
        else:
            outcome.append(None)
            return result
        finally:
            ended.set()

    monkeypatch.setattr(_tool_module, "load_paths", load)
    task: asyncio.Task[Any] | None = None

    class GiveUp(AsyncCallbackHandler):
        async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
            if data["kind"] == "converting" and task is not None:
                task.cancel()

    call = _tool(tmp_path).ainvoke({"query": "q", "paths": ["reports"]}, config={"callbacks": [GiveUp()]})
    task = asyncio.ensure_future(call)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(ended.wait, 60), "the loading thread did not stop"
    assert isinstance(outcome[0], FileLoadError) and "cancel" in str(outcome[0])
    assert len(runs) < 12, runs


def test_text_that_is_a_pdfs_raw_bytes_is_refused_naming_paths(reports: Path) -> None:
    """Issue 36: an agent that read a PDF as text and passed it as ``text`` gets told to pass its path."""
    raw = (reports / "reports" / "q3.pdf").read_bytes().decode("utf-8", errors="ignore")
    answer = _tool(reports).invoke({"query": "combination?", "text": raw})
    assert answer.startswith("text is the raw bytes of a PDF file ('%PDF-1.3")
    assert "give the file in paths" in answer and "\n" not in answer
