"""`RLMTool`: a LangChain tool with which an agent hands a large corpus (files, globs, text) to an RLM.

Files are read by the same loader as the MCP server (`rlm_adapters.files`), only from under the roots
given at construction.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field, model_validator

from rlm_adapters.core import RLM, Callback, RLMResult
from rlm_adapters.core.adapter_kit import run_sync
from rlm_adapters.documents import ConversionProgress, binary_kind
from rlm_adapters.errors import RLMError
from rlm_adapters.files import DEFAULT_MAX_BYTES, LoadResult, load_paths
from rlm_adapters.langchain._chat import ChatRLM
from rlm_adapters.langchain._tool_progress import aconversions_to, aevent_to, conversions_to, events_to
from rlm_adapters.sources import SourceTracker, sources_block


class RLMToolInput(BaseModel):
    """The tool's arguments: a question, and either paths or text."""

    query: str = Field(description="The question to answer about the files or the text.")
    paths: list[str] | None = Field(
        default=None,
        description="Files, folders (read recursively) or glob patterns such as 'logs/**/*.log', "
        "relative to the working folder or to one of the allowed folders.",
    )
    text: str | None = Field(default=None, description="Text to reason over, instead of paths.")

    @model_validator(mode="after")
    def _one_source(self) -> RLMToolInput:
        if bool(self.paths) == (self.text is not None):
            raise ValueError("give either paths or text (exactly one of them)")
        return self


class RLMTool(BaseTool):
    """Answer a question about files or text far larger than a context window, with an RLM.

    The corpus becomes the RLM's context (a list of ``{"id", "text", "metadata"}`` documents for
    paths, a string for text); the answer comes back as the tool's output, followed by a note of the
    files that were skipped (binary, ignored) and a ``Sources:`` block of ``path:start-end`` lines, ending
    with an ``Unsupported:`` line for claims that no input a model read holds. Called with a tool call,
    the `ToolMessage` also carries an artifact: ``sources`` (path, line_start, line_end, chars, excerpt,
    place), ``claims`` (each supported with its source, or unsupported with why), ``sources_note``,
    finish reason, usage, cost, files read and skipped. Paths outside `roots` and loading problems come
    back to the agent as a tool error it can act on.

    Progress goes to the call's callbacks as ``rlm_progress`` custom events of the tool's run: first, while
    documents (PDFs, Office files, notebooks...) are converted, ``{"kind": "converting", "done", "total",
    "label", "text": "converting 12/40 PDFs"}``, then the run's engine events (``run_start`` ... ``final``).

    Args:
        llm: The `ChatRLM` whose engine settings (models, sandbox, limits) the runs use.
        roots: Folders the agent may read from. A relative path is looked up in the working folder first,
            then in each root in turn; wherever it is found, it must lie under one of the roots.
        max_bytes: Cap on the total size of the files of one call.
    """

    name: str = "rlm_query"
    description: str = (
        "Answer a question about a large corpus: files, folders or glob patterns (paths) or a long text. "
        "A recursive language model reads it with code, so it may be far larger than your context."
    )
    args_schema: type[BaseModel] = RLMToolInput
    # The text goes to the agent; the artifact (sources, usage, files) rides on the ToolMessage.
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool = True
    llm: ChatRLM
    roots: list[str | Path]
    max_bytes: int = DEFAULT_MAX_BYTES

    def _load(
        self,
        paths: list[str] | None,
        text: str | None,
        progress: Callable[[ConversionProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> tuple[Any, LoadResult | None]:
        if text is not None:
            if (kind := binary_kind(text)) is not None:  # a file read as text: the agent should pass its path
                raise ToolException(
                    f"text is the raw bytes of {kind} ({text[:10]!r}...), not text: give the file in paths, "
                    "which converts documents to text behind the sandbox's walls"
                )
            if not text or text.isspace():
                raise ToolException(f"text is empty ({len(text)} characters of whitespace): give the text, or paths")
            return text, None
        try:
            loaded = load_paths(paths or [], self.roots, max_bytes=self.max_bytes, cancel=cancel, progress=progress)
        except RLMError as exc:  # refused or unreadable paths: the agent should see why and try again
            raise ToolException(str(exc)) from exc
        empty = loaded.empty(paths or [])
        if empty is not None:  # as rlm ask and rlm-mcp refuse it: a run over nothing still costs a model call
            raise ToolException(f"{empty}: give paths a file with text in it, or text")
        return loaded.documents(), loaded

    @staticmethod
    def _output(result: RLMResult, loaded: LoadResult | None) -> tuple[str, dict[str, Any]]:
        if result.finish_reason == "error":
            raise ToolException(f"the RLM run failed: {result.error}")
        answer = result.response
        if result.finish_reason != "final":
            answer += f"\n\n(partial answer: the run stopped early, {result.finish_reason})"
        if loaded is not None and loaded.skipped:
            names = ", ".join(f"{s.path} ({s.reason})" for s in loaded.skipped[:10])
            answer += f"\n\n(skipped {len(loaded.skipped)} files: {names})"
        block = sources_block(result.sources, result.claims, result.sources_note)
        if block:
            answer += f"\n\n{block}"
        artifact = {
            "sources": [source.to_dict() for source in result.sources],
            "claims": [claim.to_dict() for claim in result.claims],
            "sources_note": result.sources_note,
            "finish_reason": result.finish_reason,
            "usage": result.usage_summary.to_dict(),
            "cost": result.cost,
            "run_id": result.run_id,
            "trajectory_file": str(result.trajectory_file) if result.trajectory_file else None,
            "files_read": [f.path for f in loaded.files] if loaded is not None else [],
            "files_skipped": [{"path": s.path, "reason": s.reason} for s in loaded.skipped] if loaded else [],
        }
        return answer, artifact

    @staticmethod
    def _tracker(context: Any, engine: RLM) -> SourceTracker:
        return SourceTracker(context, max_output_chars=engine.max_output_chars, text_name="text")

    async def _arun(
        self,
        query: str,
        paths: list[str] | None = None,
        text: str | None = None,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, dict[str, Any]]:
        # A folder walk can take a while: off the event loop, like the MCP server's loader; a cancelled
        # call stops it (and its conversions) at the next entry.
        stopped = threading.Event()
        heard = aconversions_to(run_manager, asyncio.get_running_loop(), stopped)
        try:
            context, loaded = await asyncio.to_thread(self._load, paths, text, heard, stopped)
        finally:
            stopped.set()
        engine = self.llm._engine()
        result = await engine.acompletion(
            context, query, callbacks=[partial(aevent_to, run_manager)], observers=[self._tracker(context, engine)]
        )
        return self._output(result, loaded)

    def _run(
        self,
        query: str,
        paths: list[str] | None = None,
        text: str | None = None,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, dict[str, Any]]:
        context, loaded = self._load(paths, text, conversions_to(run_manager))
        engine = self.llm._engine()
        heard = events_to(run_manager)
        callbacks: list[Callback] = [] if heard is None else [heard]
        run = engine.acompletion(context, query, callbacks=callbacks, observers=[self._tracker(context, engine)])
        return self._output(run_sync(run), loaded)
