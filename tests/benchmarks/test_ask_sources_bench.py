"""The `rlm ask --sources` A/B benchmark runs both arms and checks what they answer (small: it is not timed here)."""

from __future__ import annotations

import pytest

from benchmarks.ask_sources_bench import ARMS, check, main, measure
from benchmarks.tree import HardTree, Tree


@pytest.mark.slow
def test_both_arms_run_the_real_cli_and_answer_the_planted_codes() -> None:
    timings = measure(0.3, reps=1, environment="local")
    assert set(timings) == set(ARMS)
    assert all(len(runs) == 1 and runs[0].wall > 0 and runs[0].cpu > 0 for runs in timings.values())


def test_a_wrong_answer_or_citation_is_an_error_not_a_number() -> None:
    tree = Tree(0.3)
    answer = "The rollout passwords are " + ", ".join(tree.codes()) + "."
    cited = "\n".join(f"- {path}:{line}" for path, line in sorted(tree.expected()))
    check(tree, "--sources", f"{answer}\n\nSources:\n{cited}\n")
    with pytest.raises(RuntimeError, match="answered"):
        check(tree, "plain", "The rollout passwords are unknown.\n")
    with pytest.raises(RuntimeError, match="cited"):
        check(tree, "--sources", f"{answer}\n\nSources:\n- src/elsewhere.txt:1\n")


def test_reps_below_one_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--reps", "0"])
    assert "--reps must be at least 1, not 0" in capsys.readouterr().err


@pytest.mark.slow
def test_the_hard_tree_answers_and_cites_its_planted_lines() -> None:
    timings = measure(0.4, reps=1, environment="local", kind="hard")  # `measure` checks answers and citations
    assert all(len(runs) == 1 for runs in timings.values())


def test_the_hard_tree_is_400_files_of_random_12_word_lines() -> None:
    tree = HardTree(0.4)
    assert tree.files == 400 and len(tree.words) == 30_000
    planted = {index: line for index, (line, _) in tree.planted.items()}
    for index in (0, *planted):
        lines = tree.text(index).splitlines()
        ordinary = [line for number, line in enumerate(lines, 1) if number != planted.get(index)]
        assert all(len(line.split()) == 12 for line in ordinary)
    assert HardTree(0.4).text(3) == tree.text(3)  # same seed, same tree
