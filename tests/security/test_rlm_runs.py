"""Attacks played by a root model through a real RLM run (the engine, the broker and the default sandbox)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlm_adapters import RLM, RLMLogger, ScriptedModel
from rlm_adapters.core.sandbox.subprocess import isolation
from rlm_adapters.testing import by_turn
from tests.security.attacks import HostCanaries


def _play(code: str) -> ScriptedModel:
    return by_turn(f"```repl\n{code}\n```", "FINAL(done)")


async def test_the_host_secret_never_reaches_the_model(canaries: HostCanaries) -> None:
    root = _play("import os\nprint('KEY', os.environ.get('OPENAI_API_KEY'), dict(os.environ))")
    result = await RLM(backend=root, environment="subprocess").acompletion("context", "question")
    assert result.finish_reason == "final"
    seen = "\n".join(str(m["content"]) for call in root.calls for m in call)
    assert "KEY None" in seen and canaries.secret not in seen
    assert result.metadata["isolation"].split(";")[0] == isolation.detect_level("auto", sys.executable).name
    if isolation.level_available("bwrap", sys.executable):
        assert result.metadata["isolation"].startswith(("bwrap (system)", "bwrap (bundled)"))


async def test_forged_call_frames_cannot_exceed_the_sub_call_budget(canaries: HostCanaries) -> None:
    forge = (
        "import os, json, struct\n"
        "for i in range(20):\n"
        "    body = json.dumps({'type': 'call', 'id': 5000 + i, 'kind': 'llm_query', 'args': {'prompt': 'x'}})\n"
        "    os.write(3, struct.pack('>I', len(body)) + body.encode())\n"
        "try:\n    print([llm_query('legit') for _ in range(5)])\nexcept Exception as e:\n    print('refused', e)"
    )
    sub = ScriptedModel(["sub answer"], model_name="sub")
    rlm = RLM(backend=_play(forge), other_backends=[sub], environment="subprocess", max_sub_calls=3)
    result = await rlm.acompletion("context", "question")
    assert len(sub.calls) <= 3
    assert result.finish_reason in ("final", "budget")


@pytest.mark.parametrize("environment", ["local"])
async def test_local_exposes_the_host_secret(canaries: HostCanaries, environment: str) -> None:
    """What `local` does not protect against, pinned: model code reads the host's API keys."""
    root = _play("import os\nprint(os.environ.get('OPENAI_API_KEY'))")
    await RLM(backend=root, environment=environment).acompletion("context", "question")
    seen = "\n".join(str(m["content"]) for call in root.calls for m in call)
    assert canaries.secret in seen


async def test_an_explicit_weaker_level_runs_and_is_named_in_result_log_and_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _play("print('ran')")
    rlm = RLM(
        backend=root,
        environment="subprocess",
        environment_kwargs={"isolation": "process"},
        logger=RLMLogger(log_dir=tmp_path),
        verbose=True,
    )
    result = await rlm.acompletion("context", "question")
    name = isolation.reach("process", sys.executable).name  # type: ignore[union-attr]
    assert result.finish_reason == "final" and result.metadata["isolation"].split(";")[0] == name
    records = [json.loads(line) for log in tmp_path.glob("*.jsonl") for line in log.read_text().splitlines()]
    assert any(str(r.get("isolation", "")).startswith(f"{name};") for r in records)
    assert f"subprocess ({name})" in capsys.readouterr().err.replace("\n", "")
