"""Port of the reference's answer-dict tests (tests/test_parsing.py::TestAnswerDictFinalAnswer,
tests/test_local_repl.py::TestLocalREPLHelpers) and of its final-answer flow, against `RLM`."""

from __future__ import annotations

import pytest

from rlm_adapters import RLM

from .helpers import by_turn, final, make


def test_answer_dict_ready_true_sets_final_answer() -> None:
    result = make(by_turn('```repl\nanswer["content"] = "the result"\nanswer["ready"] = True\n```')).completion("c")
    assert (result.response, result.finish_reason, result.iterations) == ("the result", "final", 1)


def test_answer_dict_unset_keeps_running() -> None:
    root = by_turn('```repl\nanswer["content"] = "wip"\n```', final("done"))
    result = make(root).completion("c")
    assert (result.response, result.iterations) == ("done", 2)


def test_answer_dict_defaults_are_the_references() -> None:
    root = by_turn("```repl\nprint(answer)\n```", final("x"))
    make(root).completion("c")
    assert "{'content': '', 'ready': False}" in root.calls[1][-1]["content"]


def test_answer_dict_rebind_with_ready() -> None:
    result = make(by_turn('```repl\nanswer = {"content": "rebound", "ready": True}\n```')).completion("c")
    assert result.response == "rebound"


def test_answer_content_can_be_non_string() -> None:
    result = make(by_turn('```repl\nanswer["content"] = [1, 2, 3]\nanswer["ready"] = True\n```')).completion("c")
    assert result.response == "[1, 2, 3]"
    assert result.final_value == [1, 2, 3]


def test_answer_update_with_ready_counts_too() -> None:
    result = make(by_turn("```repl\nanswer.update(content='via update', ready=True)\n```")).completion("c")
    assert result.response == "via update"


def test_cell_runs_to_its_end_after_ready_as_in_the_reference() -> None:
    root = by_turn('```repl\nanswer["content"] = "a"\nanswer["ready"] = True\nanswer["content"] = "b"\n```')
    assert make(root).completion("c").response == "a"


def test_final_and_final_var_still_work_alongside() -> None:
    assert make(by_turn("```repl\nFINAL('classic')\n```")).completion("c").response == "classic"
    root = by_turn("```repl\nanswer = 'a user variable'\n```\nFINAL_VAR(answer)")
    # Ours: `answer` rebound to a non-dict is a user variable and stays (the paper's prompts do this).
    assert make(root).completion("c").response == "a user variable"


@pytest.mark.parametrize("environment", ["local", "subprocess"])
def test_the_protocol_works_in_the_sandboxes(environment: str) -> None:
    root = by_turn('```repl\nanswer["content"] = str(len(context))\nanswer["ready"] = True\n```')
    assert make(root, environment=environment).completion("abcd").response == "4"


def test_the_prompt_option_chooses_what_the_system_prompt_teaches() -> None:
    classic = by_turn("FINAL(x)")
    make(classic).completion("c")
    assert "FINAL_VAR(" in classic.calls[0][0]["content"]
    assert 'answer["ready"] = True' not in classic.calls[0][0]["content"]

    reference = by_turn("```repl\nprint(1)\n```", final("y"))
    result = make(reference, final_protocol="answer").completion("c")
    system = reference.calls[0][0]["content"]
    assert 'answer["ready"] = True' in system and "FINAL_VAR(" not in system
    assert 'answer["ready"] = True' in reference.calls[1][-1]["content"]  # the turn feedback, too
    assert result.response == "y"


def test_an_unknown_prompt_option_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="final_protocol='final' must be 'FINAL' or 'answer'"):
        RLM(backend=by_turn("x"), final_protocol="final")  # type: ignore[arg-type]
