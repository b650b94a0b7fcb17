"""A planted fact on page 7 of a PDF, loaded from a folder, is answered through the real openai SDK against the
local fake server, with the REPL in each sandbox that runs here (local, subprocess, docker), and cited
``q3.pdf:p7:L4`` (its page, and its line inside the page)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, RLMResult
from rlm_adapters.core.sandbox.docker import engine_problem
from rlm_adapters.files import load_paths
from rlm_adapters.sources import SourceTracker
from rlm_adapters.testing import FakeOpenAIServer, scripted_root
from tests.documents import writers
from tests.sandbox_required import needs_sandbox

IMAGE = "rlm-sandbox-test:latest"
PREFIX = str(Path(sys.executable).resolve().parent.parent)
DOCKER = {"image": IMAGE, "python": str(Path(sys.executable).resolve()),
          "read_only_binds": {"/usr": "/usr", PREFIX: PREFIX}}  # fmt: skip
PROBLEM = engine_problem(IMAGE)

# The root model's code picks the PDF and its page 7 by the metadata the converter recorded, asks a
# sub-model about that page only, and answers with the reply.
READ_PAGE_SEVEN = """```repl
report = next(d for d in context if d["metadata"]["path"] == "q3.pdf")
start, end = report["metadata"]["pages"][6]
answer = llm_query("What is the vault combination? Quote the sentence.\\n" + report["text"][start:end])
print(answer)
```"""

SANDBOXES = [
    pytest.param(("local", {}), id="local"),
    pytest.param(("subprocess", {}), id="subprocess"),
    pytest.param(
        ("docker", DOCKER), id="docker", marks=needs_sandbox(PROBLEM and f"no usable Docker engine: {PROBLEM}")
    ),
]


def quote_the_combination(prompt: str) -> str:
    """The sub-model: the sentence of the prompt that names the combination, else NONE."""
    found = re.search(r"The vault combination is [0-9A-Z-]+\.", prompt)
    return found.group(0) if found else "NONE"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    writers.pdf(tmp_path / "q3.pdf")
    writers.pdf(tmp_path / "q2.pdf", secret_page=None)
    writers.docx(tmp_path / "terms.docx")
    return tmp_path


@pytest.fixture(params=SANDBOXES)
def answered(
    request: pytest.FixtureRequest, folder: Path, fake_server: FakeOpenAIServer, openai_options: dict[str, Any]
) -> tuple[list[dict[str, Any]], RLMResult, SourceTracker]:
    """The page-seven reader run over the folder in one sandbox: the context, the result, what heard the run."""
    environment, options = request.param
    context = load_paths([str(folder)], [folder]).documents()
    fake_server.root = scripted_root([READ_PAGE_SEVEN, "FINAL_VAR(answer)"])
    fake_server.leaf = quote_the_combination
    tracker = SourceTracker(context)
    rlm = RLM(**openai_options, environment=environment, environment_kwargs=options)
    result = rlm.completion(context, "What is the vault combination?", callbacks=[tracker.on_event])
    return context, result, tracker


def test_a_fact_on_page_seven_is_read_by_page_and_answered(
    answered: tuple[list[dict[str, Any]], RLMResult, SourceTracker], fake_server: FakeOpenAIServer
) -> None:
    context, result, _ = answered
    assert sorted(d["metadata"]["format"] for d in context) == ["docx", "pdf", "pdf"]
    assert result.finish_reason == "final", result.error
    assert result.response == writers.SECRET
    (leaf,) = [r for r in fake_server.requests_log if r.get("model") == "leaf-model"]
    asked = str(leaf["messages"][-1]["content"])
    assert "[page 7]" in asked and "[page 6]" not in asked and "[page 8]" not in asked


def test_the_answer_cites_page_seven_and_its_line(
    answered: tuple[list[dict[str, Any]], RLMResult, SourceTracker],
) -> None:
    _, result, tracker = answered
    assert result.response == writers.SECRET
    (source,) = tracker.sources(result.response)
    assert source.location == f"q3.pdf:p{writers.PLANTED_PAGE}:L{writers.PLANTED_LINE}" == "q3.pdf:p7:L4"
    # The line of the whole converted text: six pages of a heading and six lines each, then page 7's own.
    assert source.line_start == 6 * (1 + writers.LINES_PER_PAGE) + 1 + writers.PLANTED_LINE
