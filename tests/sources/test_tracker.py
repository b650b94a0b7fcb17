"""`SourceTracker.apply`: a run's result gets its sources and claims, and its trajectory records them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, RLMLogger, ScriptedModel
from rlm_adapters.core.trajectory import SOURCES_RECORD, read_trajectory
from rlm_adapters.sources import SourceTracker
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.viewer.log_build import load
from tests import planted


@pytest.mark.parametrize("environment", ["local", "subprocess"])
async def test_result_claims_flag_a_made_up_number_and_one_no_model_read(
    environment: str, fake_server: FakeOpenAIServer, openai_options: dict[str, Any], tmp_path: Path
) -> None:
    fake_server.root = planted.root(fabricated=True)
    rlm = RLM(**openai_options, environment=environment, logger=RLMLogger(tmp_path))
    documents = planted.documents()
    tracker = SourceTracker(documents, max_output_chars=rlm.max_output_chars)
    tracker.start()
    result = await tracker.apply(
        await rlm.acompletion(documents, "What are the rollout passwords?", callbacks=[tracker.on_event])
    )
    assert result.response == planted.FABRICATED_TEXT
    assert {(s.path, s.line_start, s.line_end) for s in result.sources} == planted.expected()
    planted.check_flags([claim.to_dict() for claim in result.claims])
    assert result.to_dict()["claims"] == [claim.to_dict() for claim in result.claims]
    _, records = read_trajectory(result.trajectory_file)  # type: ignore[arg-type]
    assert records[-1]["type"] == SOURCES_RECORD and records[-1]["run_id"] == result.run_id
    findings = load(result.trajectory_file).findings  # type: ignore[arg-type]
    assert findings is not None and len(findings.sources) == len(planted.PLANTED)
    assert {text for text, _ in findings.unsupported} >= {planted.FABRICATED_NUMBER, planted.UNREAD_NUMBER}


async def test_an_in_memory_trajectory_gets_the_findings_too() -> None:
    rlm = RLM(backend=ScriptedModel(planted.root(), model_name="root"), environment="local", logger=RLMLogger())
    documents = planted.documents()
    tracker = SourceTracker(documents)
    result = await tracker.apply(await rlm.acompletion(documents, "q", callbacks=[tracker.on_event]))
    record = result.metadata["trajectory"]["sources"]
    assert record["type"] == SOURCES_RECORD
    assert [s["line_start"] for s in record["sources"]] == [s.line_start for s in result.sources]


async def test_each_turn_of_a_persistent_session_cites_its_own_context() -> None:
    grep = "```repl\nhits = [l for l in context.splitlines() if 'code' in l]\nprint(hits)\n```"
    answer = "```repl\nFINAL(hits[0].split(' is ')[1].split()[0])\n```"
    rlm = RLM(
        backend=ScriptedModel([grep, answer, grep, answer], model_name="root"), environment="local", persistent=True
    )
    turns = [
        "first turn notes\nnothing here at all today\nthe first code is ALPHA-1001 for the east door\n",
        "second turn notes\nthe second code is BRAVO-2002 for the west door\nnothing more\n",
    ]
    cited = []
    try:
        for text in turns:
            tracker = SourceTracker(text)
            result = await tracker.apply(await rlm.acompletion(text, "the code?", callbacks=[tracker.on_event]))
            cited.append((result.response, [s.location for s in result.sources]))
    finally:
        await rlm.aclose()
    assert cited == [("ALPHA-1001", ["context:3"]), ("BRAVO-2002", ["context:2"])]


async def test_a_sub_call_replayed_from_the_call_cache_still_counts_as_read(tmp_path: Path) -> None:
    filler = "".join(f"an ordinary filler line, number {n}\n" for n in range(200))  # past the preview
    text = f"{filler}the vault code is QUEBEC-7731 for the north door\n{filler}"
    turns = ["```repl\nprint(llm_query(context.splitlines()[200]))\n```", "FINAL(QUEBEC-7731)"]
    cited = []
    for _ in range(2):  # the second run replays both calls: no model is asked, the prompt still reached one
        root, leaf = ScriptedModel(list(turns), model_name="root"), ScriptedModel(["ok"], model_name="leaf")
        rlm = RLM(backend=root, other_backends=[leaf], environment="local", cache=tmp_path / "calls.sqlite")
        tracker = SourceTracker(text)
        result = await tracker.apply(await rlm.acompletion(text, "the code?", callbacks=[tracker.on_event]))
        cited.append(([s.location for s in result.sources], len(root.calls) + len(leaf.calls)))
    assert cited == [(["context:201"], 3), (["context:201"], 0)]
