"""`RLMQueryEngine`: a LlamaIndex query engine that answers over all documents with an RLM.

No vector index, retriever or chunk size: the documents become the REPL's `context` (a list of
``{"id", "text", "metadata"}``), the root model filters them in code and reads what it needs through
sub-models, and the response's `source_nodes` are the documents whose text actually reached a model,
with the character ranges that did (see `rlm_adapters.sources`).

    engine = RLMQueryEngine.from_documents(SimpleDirectoryReader("docs").load_data(), llm=llm)
    response = engine.query("Which release notes mention the new cache?")
"""

# The optional dependency is checked (naming its extra) before any LlamaIndex name is imported.
# ruff: noqa: E402
from __future__ import annotations

from rlm_adapters._extras import require

require("llama_index.core", extra="llama-index", feature="RLMQueryEngine")

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Sequence
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
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from rlm_adapters.core.bridge import iter_sync, run_sync
from rlm_adapters.core.events import (
    CellExecuted,
    Event,
    RootCall,
    RunFinished,
    RunStarted,
    SubCallFinished,
    SubCallStarted,
)
from rlm_adapters.core.lm.llama_index_client import LlamaIndexClient
from rlm_adapters.core.result import RLMResult
from rlm_adapters.errors import ContextError
from rlm_adapters.llama_index._options import rlm_from
from rlm_adapters.sources import Corpus, DocumentUse, SourceTracker
from rlm_adapters.sources import Document as SourceDocument

dispatcher = get_dispatcher(__name__)

DOCUMENT_INSTRUCTIONS = (
    "`context` is a list of documents, each a dict {'id': str, 'text': str, 'metadata': dict} (metadata "
    "such as file_name, dates or author when the loader set them). Select documents in code (by metadata, "
    "keywords or regular expressions) before reading them, and send the relevant ones to sub-models."
)
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


def _json_safe(metadata: dict[str, Any]) -> dict[str, Any]:
    """Node metadata as the sandbox can receive it (JSON); other values become strings."""
    safe: dict[str, Any] = {}
    for key, value in metadata.items():
        try:
            json.dumps(value)
            safe[str(key)] = value
        except (TypeError, ValueError):
            safe[str(key)] = str(value)
    return safe


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
        ContextError: for no documents, or a document without text (unless `skip_empty`).
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
        self.nodes, self.documents = _documents(nodes, skip_empty)
        self.rlm = rlm_from(llm, sub_llm, rlm_options)
        self.streaming = streaming
        # One corpus for every query: its anchor index is built once, the first time a run needs it.
        self._corpus = Corpus([SourceDocument(d["id"], d["text"]) for d in self.documents])

    # -- constructors ---------------------------------------------------------------------------------
    @classmethod
    def from_documents(
        cls,
        documents: Sequence[BaseNode],
        llm: LLM | None = None,
        sub_llm: LLM | None = None,
        **rlm_options: Any,
    ) -> RLMQueryEngine:
        """An engine over `documents` (e.g. ``SimpleDirectoryReader(folder).load_data()``).

        Args:
            documents: The documents.
            llm: The root model as a LlamaIndex LLM (optional when ``backend`` is given).
            sub_llm: The sub-model as a LlamaIndex LLM (optional).
            **rlm_options: `RLMQueryEngine` and `RLM` options.
        """
        return cls(nodes=documents, llm=llm, sub_llm=sub_llm, **rlm_options)

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
        tracker = SourceTracker(corpus=self._corpus, max_output_chars=self.rlm.max_output_chars)
        tracker.start()  # what reaches a model is matched while the run works
        try:
            result = await self.rlm.acompletion(
                self.documents,
                query,
                callbacks=[tracker.on_event, _forwarder(active_span_id.get())],
                instructions=DOCUMENT_INSTRUCTIONS,
            )
        except BaseException:
            tracker.cancel()
            raise
        await tracker.apply(result)
        return result, await asyncio.to_thread(tracker.uses)

    async def _arespond(self, query: str) -> Response:
        result, uses = await self.arun(query)
        return Response(result.response, source_nodes=self._sources(uses), metadata=self._metadata(result, uses))

    def _sources(self, uses: list[DocumentUse]) -> list[NodeWithScore]:
        sources: list[NodeWithScore] = []
        for use in uses:
            node = self.nodes[use.index]
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


def _documents(nodes: Sequence[BaseNode], skip_empty: bool) -> tuple[list[BaseNode], list[dict[str, Any]]]:
    """The nodes that have text, and the context built from them; a clear error for unusable input."""
    if isinstance(nodes, BaseNode | str) or not isinstance(nodes, Sequence):
        raise ContextError(f"nodes must be a list of LlamaIndex nodes or documents, got {type(nodes).__name__}")
    if not nodes:
        raise ContextError("RLMQueryEngine got no documents: load at least one (e.g. SimpleDirectoryReader(...))")
    kept: list[BaseNode] = []
    documents: list[dict[str, Any]] = []
    for position, node in enumerate(nodes):
        if not isinstance(node, BaseNode):
            raise ContextError(f"nodes[{position}] is a {type(node).__name__}, not a LlamaIndex node or document")
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        if not text.strip():
            if skip_empty:
                continue
            detail = f"only metadata {sorted(node.metadata)}" if node.metadata else "no text and no metadata"
            raise ContextError(
                f"document {node.node_id!r} (nodes[{position}]) has {detail}; drop documents without text "
                "or pass skip_empty=True"
            )
        kept.append(node)
        documents.append({"id": node.node_id, "text": text, "metadata": _json_safe(dict(node.metadata))})
    if not kept:
        raise ContextError(f"none of the {len(nodes)} documents has any text; there is nothing to read")
    return kept, documents


__all__ = ["DOCUMENT_INSTRUCTIONS", "LlamaIndexClient", "RLMEvent", "RLMQueryEngine"]
