"""Ask a question over a whole folder of files with `RLMQueryEngine`: no vector index, no chunk size.

    export OPENAI_API_KEY=...            # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
    export RLM_MODEL=gpt-5-mini          # optional; RLM_SUB_MODEL sets the sub-model (default: the same)
    python examples/llama_index_engine.py ./my-notes "Which meeting decided to drop the beta?"

`from_paths` reads the folder with the project's loader: text files as they are, PDFs and Office files
converted to text behind the sandbox's walls (the ``documents`` extra), each keeping its pages. (LlamaIndex's
`SimpleDirectoryReader` without ``llama-index-readers-file`` would hand a PDF over as its raw bytes.) Every
file becomes one document of the REPL's `context`; the root model filters them in code and sends what matters
to sub-models. The sources printed are the files (and pages) whose text actually reached a model, with the
character ranges that did.
"""

from __future__ import annotations

import argparse
import os

from rlm_adapters.llama_index import RLMQueryEngine


def model_options(name: str) -> dict[str, str]:
    """OpenAI backend settings for `name`, from the usual environment variables."""
    options = {"model_name": name}
    if os.environ.get("OPENAI_BASE_URL"):
        options["base_url"] = os.environ["OPENAI_BASE_URL"]
    if os.environ.get("OPENAI_API_KEY"):
        options["api_key"] = os.environ["OPENAI_API_KEY"]
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a folder of documents (read recursively)")
    parser.add_argument("question", nargs="?", default="What are the three most important open issues?")
    args = parser.parse_args()

    model = os.environ.get("RLM_MODEL", "gpt-5-mini")
    engine = RLMQueryEngine.from_paths(
        [args.folder],
        roots=[args.folder],
        backend="openai",
        backend_kwargs=model_options(model),
        other_backends=["openai"],
        other_backend_kwargs=[model_options(os.environ.get("RLM_SUB_MODEL", model))],
    )
    response = engine.query(args.question)

    print(response)
    metadata = response.metadata or {}
    print(f"finish reason: {metadata['finish_reason']}, cost: ${metadata['cost']:.4f}")
    print(f"sources ({len(response.source_nodes)} of {len(engine.documents)} documents):")
    for source in response.source_nodes:
        metadata = source.node.metadata
        ranges = ", ".join(f"{start}-{end}" for start, end in metadata["rlm_char_ranges"])
        where = f" {metadata['place']}" if metadata.get("place") else ""
        print(f"  {metadata['file_name']}{where}: characters {ranges}")
    for skipped in engine.skipped:
        print(f"  skipped {skipped.path}: {skipped.reason}")


if __name__ == "__main__":
    main()
