"""The `rlm ask --sources` A/B benchmark runs both arms and checks what they answer (small: it is not timed here)."""

from __future__ import annotations

import pytest

from benchmarks.ask_sources_bench import ARMS, check, main, measure
from benchmarks.tree import Tree


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
