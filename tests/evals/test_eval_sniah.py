"""S-NIAH against RULER's niah_single_1 (NVIDIA/RULER c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a:
``scripts/data/synthetic/niah.py``, ``constants.py``' niah template and answer prefix, ``synthetic.yaml``)."""

import pytest

from rlm_adapters.evals.tasks.sniah import NOISE, SniahTask, key_words
from rlm_adapters.evals.tokens import count_tokens

# RULER's niah template plus answer prefix after its single-needle replacements, written out (the same text as
# applying niah.py's replacements to constants.py's template, checked in a scratch run).
RULER_HEAD = (
    "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you about "
    "the number afterwards.\n"
)
RULER_TAIL = (
    "\nWhat is the special magic number for {key} mentioned in the provided text? The special magic number for "
    "{key} mentioned in the provided text is"
)


@pytest.fixture(scope="module")
def instances():
    return SniahTask().generate(8192, 50, seed=0)


def test_prompt_is_rulers_template_with_the_answer_prefix(instances):
    for instance in instances[:5]:
        key = instance.metadata["key"]
        [message] = instance.direct_messages()
        assert message["role"] == "user"
        assert message["content"] == RULER_HEAD + instance.context + RULER_TAIL.format(key=key)
        assert instance.question == f"What is the special magic number for {key} mentioned in the provided text?"


def test_noise_sits_on_separate_lines_with_the_needle_on_its_own(instances):
    for instance in instances[:5]:
        lines = instance.context.split("\n")
        needle = f"One of the special magic numbers for {instance.metadata['key']} is: {instance.gold[0]}."
        assert lines.count(needle) == 1
        assert [line for line in lines if line != needle] == [NOISE] * instance.metadata["haystack_lines"]
        assert lines.index(needle) < len(lines) - 1  # RULER inserts before an existing line, never at the end


def test_length_counts_the_whole_prompt_plus_128_output_tokens(instances):
    for instance in instances[:5]:
        prompt = instance.direct_messages()[0]["content"]
        tokens = count_tokens(prompt) + 128
        assert tokens == instance.metadata["tokens"] <= 8192
        one_more = prompt.replace(NOISE + "\n", NOISE + "\n" + NOISE + "\n", 1)
        assert count_tokens(one_more) + 128 > 8192  # the largest haystack that fits


def test_depths_are_drawn_not_evenly_spaced(instances):
    depths = [x.metadata["depth"] for x in instances]
    assert len(depths) == 50 and len(set(depths)) > 40
    assert depths != sorted(depths)
    assert min(depths) < 0.1 and max(depths) > 0.9


def test_keys_come_from_rulers_word_lists_and_values_have_seven_digits(instances):
    adjectives, nouns = key_words()
    assert len(adjectives) > 800 and len(nouns) > 6000
    for instance in instances:
        adjective, noun = instance.metadata["key"].split("-", 1)
        assert adjective in adjectives and noun in nouns
        assert len(instance.gold[0]) == 7 and instance.gold[0].isdigit()


@pytest.mark.parametrize("length", [1024, 2**15])
def test_other_lengths_fit_too(length):
    for instance in SniahTask().generate(length, 3, seed=1):
        assert count_tokens(instance.direct_messages()[0]["content"]) + 128 <= length
        assert instance.metadata["tokens"] > length - 24 - 1  # within one noise line of the target


def test_score_is_rulers_string_match_all(instances):
    task, instance = SniahTask(), instances[0]
    assert task.score(f"{instance.gold[0]}.", instance) == 1.0
    assert task.score("1,234,567", instance) == 0.0
    assert [x.digest() for x in SniahTask().generate(8192, 3, seed=0)] == [x.digest() for x in instances[:3]]
