"""`RLMQueryEngine`: a LlamaIndex query engine that answers over all documents with an RLM.

No vector index, retriever or chunk size: the documents become the REPL's `context` (a list of
``{"id", "text", "metadata"}``), the root model filters them in code and reads what it needs through
sub-models, and the response's `source_nodes` are the documents whose text actually reached a model,
with the character ranges that did (see `rlm_adapters.sources`).

    engine = RLMQueryEngine.from_paths(["docs/"], llm=llm)   # PDFs and Office files converted behind the walls
    response = engine.query("Which release notes mention the new cache?")
"""

# The optional dependency is checked (naming its extra) before any LlamaIndex name is imported.
# ruff: noqa: E402
from __future__ import annotations

from rlm_adapters._extras import require

require("llama_index.core", extra="llama-index", feature="RLMQueryEngine")

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.base import BaseIndex
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]  # no __all__ there
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span import active_span_id
from llama_index.core.llms import LLM
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from rlm_adapters.core import (
    CellExecuted,
    Event,
    RLMResult,
    RootCall,
    RunFinished,
    RunStarted,
    SubCallFinished,
    SubCallStarted,
)
from rlm_adapters.core.adapter_kit import iter_sync, run_sync
from rlm_adapters.core.lm import LlamaIndexClient
from rlm_adapters.documents import ConversionProgress, DocumentLimits
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES, SkippedFile
from rlm_adapters.llama_index._context import context_of, node_name, tracked_document
from rlm_adapters.llama_index._options import check_option_names, rlm_from
from rlm_adapters.llama_index._paths import load_documents
from rlm_adapters.llama_index._places import place_sources
from rlm_adapters.sources import Corpus, DocumentUse, SourceTracker

dispatcher = get_dispatcher(__name__)

DOCUMENT_INSTRUCTIONS = (
    "`context` is a list of documents, each a dict {'id': str, 'text': str, 'metadata': dict} (metadata "
    "such as file_name, dates or author when the loader set them). Select documents in code (by metadata, "
    "keywords or regular expressions) before reading them, and send the relevant ones to sub-models."
)
_PATH_OPTIONS = ("roots", "max_bytes", "max_files", "document_limits", "progress")
_EVENT_TEXT_CHARS = 4_000  # observability backends store events; whole documents do not belong there


class RLMEvent(BaseEvent):
    """One step of an RLM run, as a LlamaIndex instrumentation event (inside the query's span).

    Attributes:
        rlm_kind: The engine's event kind: ``run_start``, ``root_call``, ``cell``, ``sub_call_start``,
            ``sub_call_end`` or ``final``.
        run_id: The (possibly nested) run it belongs to.
        depth: 0 for the top-level run.
        data: The event's fields, long texts cut to a few thousand characters.
    """

    rlm_kind: str
    run_id: str
    depth: int
    data: dict[str, Any]

    @classmethod
    def class_name(cls) -> str:
        """The name observability handlers see."""
        return "RLMEvent"


_FORWARDED = (RunStarted, RootCall, CellExecuted, SubCallStarted, SubCallFinished, RunFinished)


def _forwarder(span_id: str | None) -> Callable[[Event], None]:
    """Re-emits engine events through LlamaIndex's dispatcher, inside the run's span.

    The span is given explicitly: sub-call events are emitted from tasks a sandbox starts (for the
    local sandbox, from its cell thread), which do not carry the query's context variables.
    """

    def forward(event: Event) -> None:
        if not isinstance(event, _FORWARDED):
            return
        data = {
            key: value
            for key, value in event.to_dict(max_chars=_EVENT_TEXT_CHARS).items()
            if key not in ("kind", "run_id", "depth", "messages_sent")
        }
        dispatcher.event(
            RLMEvent(rlm_kind=event.kind, run_id=event.run_id, depth=event.depth, data=data, span_id=span_id)
        )

    return forward


class RLMQueryEngine(BaseQueryEngine):
    """A LlamaIndex query engine that reads every document through a Recursive Language Model.

    Args:
        nodes: The documents (any LlamaIndex nodes: `Document`, `TextNode`, ...).
        llm: A LlamaIndex LLM for the root model (else give ``backend`` / ``backend_kwargs``).
        sub_llm: A LlamaIndex LLM for the sub-models (else ``other_backends``; else the root model).
        streaming: `query` returns a `StreamingResponse` (`aquery` an `AsyncStreamingResponse`).
        skip_empty: Drop documents without text instead of raising.
        callback_manager: LlamaIndex's legacy callback manager.
        **rlm_options: Any `RLM` option (``backend``, ``environment``, ``max_depth``, ``logger``,
            ``max_cost``, ``timeout``, ...).

    Raises:
        ContextError: for no documents, a document without text (unless `skip_empty`), or documents that are
            all a file's raw bytes (a PDF read as text).
        ConfigurationError: for conflicting or invalid options.
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        llm: LLM | None = None,
        sub_llm: LLM | None = None,
        *,
        streaming: bool = False,
        skip_empty: bool = False,
        callback_manager: CallbackManager | None = None,
        **rlm_options: Any,
    ) -> None:
        super().__init__(callback_manager=callback_manager)
        self.nodes, self.documents, binary = context_of(nodes, skip_empty)
        self.rlm = rlm_from(llm, sub_llm, rlm_options)
        self.streaming = streaming
        # What was left out, each with its reason: files `from_paths` could not read, documents whose text is a
        # file's raw bytes (a PDF read by a reader that does not convert it).
        self.skipped: list[SkippedFile] = binary
        # One corpus for every query: its anchor index is built once, the first time a run needs it.
        self._corpus = Corpus([tracked_document(d) for d in self.documents])

    # -- constructors ---------------------------------------------------------------------------------
    @classmethod
    def from_documents(
        cls,
        documents: Sequence[BaseNode],
        llm: LLM | None = None,
        sub_llm: LLM | None = None,
        **rlm_options: Any,
    ) -> RLMQueryEngine:
        """An engine over `documents` (e.g. ``SimpleDirectoryReader(folder).load_data()``; for files on disk,
        `from_paths` converts PDFs and Office files, which that reader gives as raw bytes without
        ``llama-index-readers-file``). A document whose text is a file's raw bytes is left out (a warning
        names it; `skipped` lists it).

        Args:
            documents: The documents.
            llm: The root model as a LlamaIndex LLM (optional when ``backend`` is given).
            sub_llm: The sub-model as a LlamaIndex LLM (optional).
            **rlm_options: `RLMQueryEngine` and `RLM` options.
        """
        return cls(nodes=documents, llm=llm, sub_llm=sub_llm, **rlm_options)

    @classmethod
    def from_paths(
        cls,
        paths: str | Path | Sequence[str | Path],
        llm: LLM | None = None,
        sub_llm: LLM | None = None,
        *,
        roots: str | Path | Sequence[str | Path] | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
        document_limits: DocumentLimits | None = None,
        progress: Callable[[ConversionProgress], None] | None = None,
        **rlm_options: Any,
    ) -> RLMQueryEngine:
        """An engine over files, folders (read recursively) and globs, read by the project's loader.

        Preferred over LlamaIndex's readers for documents you did not write: PDFs, Office files, EPUB,
        HTML and notebooks are converted inside the sandbox's walls (time and memory limits per document,
        no network), never parsed on the host, and each keeps its pages (slides, sheets, cells), so the
        response's `source_nodes` name the page and the line inside it (``metadata["page"] == 7``,
        ``metadata["place"] == "p7:L4"``). Files that cannot be read (an encrypted PDF, a binary, a
        document while the ``documents`` extra is missing) are skipped with their reason: a warning names
        them, and `skipped` lists them.

        Args:
            paths: Files, folders or glob patterns such as ``"reports/**/*.pdf"``. A relative path is looked
                up in the working folder first, then in each root in turn.
            llm: The root model as a LlamaIndex LLM (optional when ``backend`` is given).
            sub_llm: The sub-model as a LlamaIndex LLM (optional).
            roots: Folders that may be read (default: the working folder); wherever a path is found, it
                must lie under one of them, symlinks followed.
            max_bytes: Cap on the total size of the files (documents by their converted text).
            max_files: Cap on the number of files.
            document_limits: Limits of each document's conversion (`rlm_adapters.documents.DocumentLimits`).
            progress: Hears ``converting 12/40 PDFs`` while documents are converted.
            **rlm_options: `RLMQueryEngine` and `RLM` options, as for `from_documents`.

        Raises:
            PathNotAllowedError: a path lies, or leads through a symlink, outside every root.
            FileLoadError: a path does not exist, a cap was exceeded, or no file could be read.
        """
        # The engine's own options, and this constructor's (named in the hint when one is misspelt).
        engine_names = ("streaming", "skip_empty", "callback_manager", "llm", "sub_llm", *_PATH_OPTIONS)
        check_option_names(rlm_options, engine_names, "RLMQueryEngine.from_paths")  # before converting a folder
        documents, skipped = load_documents(
            paths,
            roots,
            max_bytes=max_bytes,
            max_files=max_files,
            document_limits=document_limits,
            progress=progress,
        )
        engine = cls(nodes=documents, llm=llm, sub_llm=sub_llm, **rlm_options)
        engine.skipped = [*skipped, *engine.skipped]
        return engine

    @classmethod
    def from_index(
        cls, index: BaseIndex[Any], llm: LLM | None = None, sub_llm: LLM | None = None, **rlm_options: Any
    ) -> RLMQueryEngine:
        """An engine over every node in `index`'s docstore (no retrieval: all of them are the context)."""
        return cls(nodes=list(index.docstore.docs.values()), llm=llm, sub_llm=sub_llm, **rlm_options)

    # -- BaseQueryEngine --------------------------------------------------------------------------------
    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _query(self, query_bundle: QueryBundle) -> Response | StreamingResponse:
        if self.streaming:
            return self._stream(query_bundle.query_str)
        return run_sync(self._arespond(query_bundle.query_str))

    async def _aquery(self, query_bundle: QueryBundle) -> Response | AsyncStreamingResponse:
        if self.streaming:
            return self._astream(query_bundle.query_str)
        return await self._arespond(query_bundle.query_str)

    # -- running --------------------------------------------------------------------------------------
    def document_index(self) -> Corpus:
        """The documents as the source tracker reads them, kept for every query (its index is built once)."""
        return self._corpus

    @dispatcher.span
    async def arun(self, query: str) -> tuple[RLMResult, list[DocumentUse]]:
        """Run the RLM over the documents and work out which of them it used.

        The same tracker as every adapter's (`rlm_adapters.sources.SourceTracker`): the result also gets
        its cited ``sources`` and checked ``claims``.

        Returns:
            The run's result and the documents used (what the run chose to read: the automatic preview
            of the first document does not count), in document order.
        """
        if not query or query.isspace():  # as rlm ask, rlm-mcp and rlm serve refuse it, before a model call
            raise ConfigurationError(f"the query is empty ({query!r}): ask a question about the documents")
        # The documents read are listed by the same observer, within the run's `sources_timeout`.
        tracker = SourceTracker(corpus=self._corpus, max_output_chars=self.rlm.max_output_chars, read=True)
        result = await self.rlm.acompletion(
            self.documents,
            query,
            callbacks=[_forwarder(active_span_id.get())],
            instructions=DOCUMENT_INSTRUCTIONS,
            observers=[tracker],
        )
        return result, tracker.read_uses or []

    async def _arespond(self, query: str) -> Response:
        result, uses = await self.arun(query)
        return Response(result.response, source_nodes=self._sources(uses), metadata=self._metadata(result, uses))

    def _sources(self, uses: list[DocumentUse]) -> list[NodeWithScore]:
        sources: list[NodeWithScore] = []
        for use in uses:
            node = self.nodes[use.index]
            if self._corpus.documents[use.index].places:  # a converted document: one source per page read
                sources.extend(place_sources(node, self._corpus.documents[use.index], list(use.ranges)))
                continue
            ranges = [list(r) for r in use.ranges]
            lines = self._line_ranges(use)
            keys = ["rlm_char_ranges", "rlm_line_ranges"]
            # A copy, so the caller's node is untouched; the ranges stay out of LLM and embedding text.
            copy = node.model_copy(
                update={
                    "metadata": {**node.metadata, "rlm_char_ranges": ranges, "rlm_line_ranges": lines},
                    "excluded_llm_metadata_keys": [*node.excluded_llm_metadata_keys, *keys],
                    "excluded_embed_metadata_keys": [*node.excluded_embed_metadata_keys, *keys],
                }
            )
            length = len(self.documents[use.index]["text"])
            sources.append(NodeWithScore(node=copy, score=use.chars / length if length else None))
        return sources

    def _line_ranges(self, use: DocumentUse) -> list[list[int]]:
        """`use`'s character ranges as ``[first, last]`` line numbers (from 1, inclusive)."""
        document = self._corpus.documents[use.index]
        ends = [offset for start, end in use.ranges for offset in (start, max(start, end - 1))]
        lines = document.lines_of(ends)
        return [[lines[i] + 1, lines[i + 1] + 1] for i in range(0, len(lines), 2)]

    def _metadata(self, result: RLMResult, uses: list[DocumentUse]) -> dict[str, Any]:
        return {
            "usage": result.usage_summary.to_dict(),
            "cost": result.cost,
            "finish_reason": result.finish_reason,
            "iterations": result.iterations,
            "route": result.metadata.get("route", "rlm"),
            "route_reason": result.metadata.get("route_reason"),
            "trajectory_file": str(result.trajectory_file) if result.trajectory_file else None,
            "run_id": result.run_id,
            "error": result.error,
            # The lines the answer cites and its claims checked, as every adapter gives them.
            "citations": [source.to_dict() for source in result.sources],
            "claims": [claim.to_dict() for claim in result.claims],
            "sources_note": result.sources_note,
            "sources": [
                {
                    "id": u.doc_id,
                    "name": node_name(self.nodes[u.index]),
                    "ranges": [list(r) for r in u.ranges],
                    "lines": self._line_ranges(u),
                    "sub_calls": u.sub_calls,
                    "printed": u.printed,
                }
                for u in uses
            ],
        }

    # -- streaming ------------------------------------------------------------------------------------
    def _stream(self, query: str) -> StreamingResponse:
        """Start the run now (on a private thread, see `iter_sync`); the generator yields the answer once known.

        A run still in flight at interpreter exit finishes and closes its sandbox instead of being cut off.
        """
        streamed = StreamingResponse(response_gen=_nothing(), source_nodes=[], metadata={})

        async def tokens() -> AsyncIterator[str]:
            response = await self._arespond(query)
            # Fill in place: the caller holds this response object, and may read sources after streaming.
            streamed.source_nodes.extend(response.source_nodes)
            assert streamed.metadata is not None
            streamed.metadata.update(response.metadata or {})
            for chunk in _chunks(response.response or ""):
                yield chunk

        # Started here, in the query's context: the run's events keep its instrumentation span.
        streamed.response_gen = iter_sync(tokens())
        return streamed

    def _astream(self, query: str) -> AsyncStreamingResponse:
        task = asyncio.ensure_future(self._arespond(query))
        source_nodes: list[NodeWithScore] = []
        metadata: dict[str, Any] = {}

        async def tokens() -> AsyncGenerator[str, None]:
            response = await task
            source_nodes.extend(response.source_nodes)
            metadata.update(response.metadata or {})
            for chunk in _chunks(response.response or ""):
                yield chunk

        return AsyncStreamingResponse(response_gen=tokens(), source_nodes=source_nodes, metadata=metadata)


def _nothing() -> Generator[str, None, None]:
    yield from ()


def _chunks(text: str) -> list[str]:
    """The answer as word-sized pieces (with their whitespace), like a token stream."""
    return re.findall(r"\S+\s*|\s+", text)


__all__ = ["DOCUMENT_INSTRUCTIONS", "LlamaIndexClient", "RLMEvent", "RLMQueryEngine"]
