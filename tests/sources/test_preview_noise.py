"""Issue 36, citation noise: the automatic preview of the first file is not a source of the answer.

The root model is shown the beginning of its context; lines there that share a word with the answer were cited
beside what the run really read (``.ci/run:6-8`` beside ``README.md:45``), and a spreadsheet row the answer
is about was pinned with its neighbour (``deaths.xlsx``: rows 6-7 for row 7) when it was the first file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.files import load_paths
from rlm_adapters.sources import SourceTracker
from tests.documents import writers

REAL_DEATHS = Path("/opt/rlm-real-documents/usr/lib/R/site-library/readxl/extdata/deaths.xlsx")
CI_RUN = """#!/bin/sh
# Run the checks the project's CI runs.
set -eu
python -m pytest tests -q --timeout 600
ruff check rlm_adapters tests
mypy rlm_adapters
# the timeout for the whole job is the default of the runner
"""
README_FACT = "The default timeout of a run is 600 seconds; pass --timeout to change it."


async def cited(context: Any, turns: list[str], question: str) -> tuple[list[str], str | None, list[Any]]:
    rlm = RLM(backend=ScriptedModel(turns, model_name="root"), environment="local")
    tracker = SourceTracker(context)
    tracker.start()
    result = await tracker.apply(await rlm.acompletion(context, question, callbacks=[tracker.on_event]))
    return [source.location for source in result.sources], result.sources_note, result.claims


def project(tmp_path: Path) -> list[dict[str, Any]]:
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(CI_RUN)
    filler = [f"Filler paragraph {n} about installation and usage of this library." for n in range(1, 45)]
    rest = [f"More filler {n} on other topics entirely." for n in range(46, 80)]
    (tmp_path / "README.md").write_text("\n".join([*filler, README_FACT, *rest]) + "\n")
    documents = load_paths([str(tmp_path)], [tmp_path], base=tmp_path, display_base=tmp_path).documents()
    assert [d["metadata"]["path"] for d in documents] == [".ci/run", "README.md"]  # .ci/run is the preview
    return documents


async def test_the_first_files_preview_is_not_cited_beside_what_the_run_read(tmp_path: Path) -> None:
    grep = (
        "```repl\nreadme = [d for d in context if d['metadata']['path'] == 'README.md'][0]\n"
        "print([l for l in readme['text'].splitlines() if 'timeout' in l])\n```"
    )
    sources, note, _ = await cited(project(tmp_path), [grep, f"FINAL({README_FACT})"], "The default timeout?")
    assert sources == ["README.md:45"] and note is None


async def test_a_run_that_answers_from_the_preview_alone_still_cites_it(tmp_path: Path) -> None:
    answer = "FINAL(The CI runs python -m pytest tests -q --timeout 600, then ruff check and mypy.)"
    sources, _, claims = await cited(project(tmp_path), [answer], "What does CI run?")
    assert sources and all(source.startswith(".ci/run:") for source in sources)
    numbers = [claim for claim in claims if claim.kind == "number"]
    assert [c.text for c in numbers] == ["600"] and all(c.status == "supported" for c in numbers)


@pytest.mark.skipif(not REAL_DEATHS.exists(), reason="needs readxl's deaths.xlsx (Debian's r-cran-readxl)")
async def test_a_claim_about_a_spreadsheet_row_cites_that_row_not_its_neighbour(tmp_path: Path) -> None:
    writers.needs_reader("openpyxl", "XLSX files")
    (tmp_path / "deaths.xlsx").write_bytes(REAL_DEATHS.read_bytes())
    context = load_paths([str(tmp_path)], [tmp_path], base=tmp_path, display_base=tmp_path).documents()
    grep = "```repl\nprint([l for l in context[0]['text'].splitlines() if 'Carrie' in l])\n```"
    answer = "FINAL(Carrie Fisher, an actor, died on 2016-12-27 at 60.)"
    sources, _, _ = await cited(context, [grep, answer], "When did Carrie Fisher die?")
    assert sources == ["deaths.xlsx:arts!A7:F7"]
