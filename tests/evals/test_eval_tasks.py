import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks import OolongPairsTask, OolongTask, SniahTask, make_task


@pytest.mark.parametrize(
    ("name", "cls"), [("sniah", SniahTask), ("oolong", OolongTask), ("oolong-pairs", OolongPairsTask)]
)
def test_make_task_builds_the_family(name, cls):
    assert isinstance(make_task(name), cls)


def test_a_data_dir_the_task_cannot_use_is_refused(tmp_path):
    for name in ("sniah", "oolong-pairs"):
        with pytest.raises(ConfigurationError, match=f"--data-dir is not used by '{name}'"):
            make_task(name, tmp_path)
    with pytest.raises(ConfigurationError, match=r"no \.jsonl or \.json oolong-synth rows"):
        make_task("oolong", tmp_path)
