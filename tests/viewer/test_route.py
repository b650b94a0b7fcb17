"""The viewer says which route a run took and why (issue 50): a direct call, and a direct prompt the model
refused that the RLM then answered; the route's reason is escaped like every text of a log."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from rlm_adapters import RLM, RLMLogger, ScriptedModel
from rlm_adapters.errors import ModelError
from rlm_adapters.viewer.html import render_html
from rlm_adapters.viewer.log_build import load
from rlm_adapters.viewer.terminal import render


def _text(log: Path) -> str:
    console = Console(record=True, width=300, file=io.StringIO(), color_system=None)
    console.print(render(load(log)))
    return console.export_text()


def test_a_direct_call_and_a_fallback_are_named_with_their_reason(tmp_path: Path) -> None:
    direct = RLM(backend=ScriptedModel(lambda m: "plain answer", model_name="m"), direct_below_tokens=1_000,
                 logger=RLMLogger(tmp_path / "direct"))  # fmt: skip
    log = direct.completion("a short note", "what?").trajectory_file
    assert log is not None
    text = _text(log)
    assert "direct call " in text and "the prompt is " in text and "under direct_below_tokens=1,000" in text
    assert "answer: plain answer" in text
    page = render_html(load(log))
    assert '"route": "direct"' in page or '"route":"direct"' in page

    calls: list[int] = []

    def refusing(messages: list[dict[str, str]]) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ModelError("maximum context length is 8192 tokens \x1b[2J", model="m", status_code=400)
        return "FINAL(rlm answer)"

    fell = RLM(backend=ScriptedModel(refusing, model_name="m"), direct_below_tokens=1_000, environment="local",
               logger=RLMLogger(tmp_path / "fell"))  # fmt: skip
    log = fell.completion("a short note", "what?").trajectory_file
    assert log is not None
    text = _text(log)
    assert text.splitlines()[1].startswith("RLM ") and "refused it as too long" in text
    assert "\x1b" not in text and "\\x1b[2J" in text  # the provider's words are shown, never acted on
