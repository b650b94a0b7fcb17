import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks import (
    LegacyOolongPairsTask,
    LegacyOolongTask,
    LegacySniahTask,
    OolongPairsTask,
    OolongTask,
    SniahTask,
    make_task,
)


@pytest.mark.parametrize(
    ("name", "protocol", "cls"),
    [
        ("sniah", "paper", SniahTask),
        ("sniah", "legacy", LegacySniahTask),
        ("oolong", "paper", OolongTask),
        ("oolong", "legacy", LegacyOolongTask),
        ("oolong-pairs", "paper", OolongPairsTask),
        ("oolong-pairs", "legacy", LegacyOolongPairsTask),
    ],
)
@pytest.mark.parametrize("scoring", ["paper", "lenient"])
def test_make_task_picks_the_protocol_and_carries_the_scoring(name, protocol, cls, scoring):
    task = make_task(name, protocol=protocol, scoring=scoring)
    assert isinstance(task, cls) and (task.protocol, task.scoring) == (protocol, scoring)


def test_a_data_dir_the_task_cannot_use_is_refused(tmp_path):
    for name, protocol in (("sniah", "paper"), ("oolong-pairs", "paper"), ("oolong", "legacy")):
        with pytest.raises(ConfigurationError, match=f"--data-dir is not used by '{name}'"):
            make_task(name, tmp_path, protocol=protocol)
    with pytest.raises(ConfigurationError, match=r"no \.jsonl or \.json oolong-synth rows"):
        make_task("oolong", tmp_path)


def test_legacy_oolong_can_be_scored_as_the_original(tmp_path):
    instance = next(x for x in LegacyOolongTask().generate(4096, 8, seed=1) if x.metadata["answer_type"] == "number")
    gold = int(instance.gold)
    assert LegacyOolongTask("lenient").score(f"Answer: {gold:,} lines", instance) == 1.0
    assert LegacyOolongTask("paper").score(f"Answer: {gold} lines", instance) == 0.0
    assert LegacyOolongTask("paper").score(f"Answer: {gold}", instance) == 1.0
