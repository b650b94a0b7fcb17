"""Unusable input fails at construction with one clear line; a missing extra names the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from llama_index.core import Document
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode

from rlm_adapters import ScriptedModel
from rlm_adapters.errors import ConfigurationError, ContextError
from rlm_adapters.llama_index import RLMQueryEngine

ROOT = ScriptedModel(["FINAL(x)"])


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_an_empty_document_list() -> None:
    with pytest.raises(ContextError) as error:
        RLMQueryEngine.from_documents([], backend=ROOT)
    assert _one_line(error) == ("RLMQueryEngine got no documents: load at least one (e.g. SimpleDirectoryReader(...))")


def test_documents_with_no_text() -> None:
    docs = [Document(text="", id_="a"), Document(text="  \n", id_="b")]
    with pytest.raises(ContextError) as error:
        RLMQueryEngine.from_documents(docs, backend=ROOT)
    assert _one_line(error) == (
        "document 'a' (nodes[0]) has no text and no metadata; drop documents without text or pass skip_empty=True"
    )
    with pytest.raises(ContextError, match=r"^none of the 2 documents has any text; there is nothing to read$"):
        RLMQueryEngine.from_documents(docs, backend=ROOT, skip_empty=True)


def test_a_node_with_only_metadata() -> None:
    nodes = [
        TextNode(text="Real text about the roadmap for the next two quarters.", id_="t"),
        TextNode(text="", id_="m", metadata={"file_name": "scan.pdf", "author": "Ana"}),
    ]
    with pytest.raises(ContextError) as error:
        RLMQueryEngine(nodes=nodes, backend=ROOT)
    assert _one_line(error).startswith("document 'm' (nodes[1]) has only metadata ['author', 'file_name'];")
    engine = RLMQueryEngine(nodes=nodes, backend=ROOT, skip_empty=True, environment="local")
    assert [d["id"] for d in engine.documents] == ["t"]
    # Metadata is part of each document in the REPL, but never of its text.
    assert engine.documents[0] == {"id": "t", "text": nodes[0].text, "metadata": {}}


def test_not_nodes() -> None:
    with pytest.raises(ContextError, match=r"^nodes\[0\] is a str, not a LlamaIndex node or document$"):
        RLMQueryEngine(nodes=["plain text"], backend=ROOT)  # type: ignore[list-item]
    with pytest.raises(ContextError, match=r"^nodes must be a list of LlamaIndex nodes or documents, got Document$"):
        RLMQueryEngine(nodes=Document(text="x"), backend=ROOT)  # type: ignore[arg-type]


def test_llm_and_backend_together_are_refused() -> None:
    docs = [Document(text="some text")]
    with pytest.raises(ConfigurationError, match=r"^give either llm= or backend=, not both$"):
        RLMQueryEngine.from_documents(docs, llm=MockLLM(), backend=ROOT)
    with pytest.raises(ConfigurationError, match=r"^give either sub_llm= or other_backends=, not both$"):
        RLMQueryEngine.from_documents(docs, backend=ROOT, sub_llm=MockLLM(), other_backends=[ROOT])


BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("llama_index", "llama_index_instrumentation"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    """
)


def test_without_llama_index_the_core_imports_and_the_engine_names_the_extra() -> None:
    code = BLOCKER + textwrap.dedent(
        """
        import rlm_adapters
        result = rlm_adapters.RLM(backend=rlm_adapters.ScriptedModel(["FINAL(ok)"]), environment="local")
        print("core:", result.completion("text", "q").response)
        try:
            from rlm_adapters.llama_index import RLMQueryEngine
        except rlm_adapters.MissingExtraError as exc:
            print("engine:", exc)
        try:
            rlm_adapters.RLM(backend="llama_index", backend_kwargs={"llm": object()})
        except rlm_adapters.MissingExtraError as exc:
            print("backend:", exc)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "core: ok",
        "engine: RLMQueryEngine needs the optional dependency 'llama_index.core': "
        'install it with pip install "rlm-adapters[llama-index]"',
        "backend: backend='llama_index' needs the optional dependency 'llama_index.core.llms': "
        'install it with pip install "rlm-adapters[llama-index]"',
    ]


@pytest.mark.parametrize("query", ["", "  \n"])
def test_an_empty_query_is_refused_before_a_model_call(query: str) -> None:
    """Issue 51: as ``rlm ask``, ``rlm-mcp`` and ``rlm serve`` refuse an empty question."""
    root = ScriptedModel(["FINAL(x)"])
    engine = RLMQueryEngine.from_documents([Document(text="words", id_="a")], backend=root, environment="local")
    with pytest.raises(ConfigurationError) as error:
        engine.query(query)
    assert _one_line(error) == f"the query is empty ({query!r}): ask a question about the documents"
    assert root.calls == []
