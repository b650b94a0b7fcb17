"""verbose printing, trajectory lookup by id, and tools in nested runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_adapters import RLM, Message, RLMLogger, ScriptedModel, read_trajectory
from rlm_adapters.testing import by_turn as turns


def test_verbose_off_writes_nothing_to_stdout_or_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    RLM(backend=turns("```repl\nprint('from the cell')\n```", "FINAL(x)"), environment="local").completion("c", "q")
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_verbose_on_prints_iterations_code_and_answer_to_stderr_only(capfd: pytest.CaptureFixture[str]) -> None:
    rlm = RLM(
        backend=turns("```repl\nprint('from the cell')\n```", "FINAL(the answer)"), environment="local", verbose=True
    )
    rlm.completion("c", "q")
    out, err = capfd.readouterr()
    assert out == ""
    assert "iteration 1" in err and "from the cell" in err and "the answer" in err and "final" in err


def test_logger_finds_a_run_by_id_and_prefix(tmp_path: Path) -> None:
    logger = RLMLogger(tmp_path)
    result = RLM(backend=turns("FINAL(x)"), environment="local", logger=logger).completion("c", "q")
    assert logger.find(result.run_id) == result.trajectory_file
    assert logger.find(result.run_id[:10]) == result.trajectory_file
    assert logger.find("0" * 32) is None
    header, events = read_trajectory(result.trajectory_file)  # type: ignore[arg-type]
    assert header["run_id"] == result.run_id and header["config"]["max_depth"] == 1
    assert events[-1]["finish_reason"] == "final"


def test_torn_last_line_of_a_live_log_is_skipped(tmp_path: Path) -> None:
    result = RLM(backend=turns("FINAL(x)"), environment="local", logger=RLMLogger(tmp_path)).completion("c", "q")
    path = result.trajectory_file
    assert path is not None
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"type": "event", "kind": "ce')
    _, events = read_trajectory(path)
    assert events[-1]["kind"] == "final"


def test_custom_sub_tools_reach_nested_runs_only() -> None:
    def model(messages: list[Message]) -> str:
        if "Child" in messages[1]["content"]:
            return "```repl\nFINAL(helper() + ' / ' + str('top_tool' in globals()))\n```"
        return "```repl\nFINAL(rlm_query('Child task', context='x') + ' / ' + str('helper' in globals()))\n```"

    rlm = RLM(
        backend=ScriptedModel(model),
        max_depth=2,
        environment="local",
        custom_tools={"top_tool": lambda: "top"},
        custom_sub_tools={"helper": lambda: "from helper"},
    )
    assert rlm.completion("ctx", "q").response == "from helper / False / False"


def test_budget_warning_event_at_eighty_percent_names_the_run() -> None:
    from rlm_adapters import BudgetEvent, Event

    events: list[Event] = []
    root = turns("```repl\nprint('x' * 3000)\n```", "```repl\nprint('y')\n```", "FINAL(done)")
    result = RLM(backend=root, environment="local", max_root_tokens=2800, callbacks=[events.append]).completion(
        "c", "q"
    )
    warnings = [e for e in events if isinstance(e, BudgetEvent) and not e.exhausted]
    assert warnings and warnings[0].resource == "root_tokens"
    assert warnings[0].run_id == result.run_id
