import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks.codeqa import (
    KNOWN_MISSING,
    CodeQATask,
    default_data_dir,
    inventory,
    load_items,
    parse_item,
)
from rlm_adapters.evals.tokens import count_tokens

ITEM = """# Metadata
- ID: 66f2cb0f821e116aacb2ba6d
- Domain: Code Repository Understanding
- Subdomain: Code repo QA
- Difficulty: {difficulty}
- Length: short
# Question
Which function parses the config?
# Choices
- A: load()
- B: parse_config()
- C: main()
- D: run()
# Answer
{answer}
"""


def write_item(folder, stem, answer, context_words, difficulty="easy"):
    (folder / f"{stem}.md").write_text(ITEM.format(answer=answer, difficulty=difficulty))
    (folder / f"{stem}_context.txt").write_text("def parse_config():\n    pass\n" * context_words)


def test_every_item_with_a_context_runs_in_order_whatever_its_length(tmp_path):
    write_item(tmp_path, "sample_002_hard_short", "C", 2000, "hard")
    write_item(tmp_path, "sample_001_easy_short", "B", 100)
    (tmp_path / "sample_003_easy_long.md").write_text(ITEM.format(answer="A", difficulty="easy"))  # no context
    assert [item.stem for item in load_items(tmp_path)] == ["sample_001_easy_short", "sample_002_hard_short"]
    task = CodeQATask(tmp_path)
    instances = task.generate(4096, 5, seed=0)
    # The second context has about 18k tokens: LongBench runs it anyway (a 4096 length only labels it).
    assert [x.gold for x in instances] == ["B", "C"] and instances[1].metadata["tokens"] > 4096
    assert [x.id for x in task.generate(4096, 5, seed=7)] == [x.id for x in instances]
    assert [x.gold for x in task.generate(4096, 1, seed=0)] == ["B"]


def test_bad_item_and_missing_folder_raise(tmp_path):
    (tmp_path / "bad.md").write_text(ITEM.replace("- D: run()\n", "").format(answer="B", difficulty="easy"))
    with pytest.raises(ConfigurationError, match="choices A-D"):
        parse_item(tmp_path / "bad.md")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigurationError, match="no CodeQA items"):
        CodeQATask(empty)
    with pytest.raises(ConfigurationError, match="--data-dir"):
        CodeQATask(tmp_path / "nowhere")


@pytest.mark.skipif(default_data_dir() is None, reason="the shared LongBench v2 CodeQA folder is absent")
def test_shared_items_load_with_their_gold_letters():
    items = {item.stem: item for item in load_items(default_data_dir())}
    assert len(items) == 31
    assert items["sample_191_hard_long"].answer == "A"
    assert items["sample_191_hard_long"].question == "In pissa, dora and loftq, which one supports scaling options?"
    assert sum(item.answer == "C" for item in items.values()) == 9


MULTILINE = """# Metadata
- ID: x
- Difficulty: hard
- Length: long
# Question
Which optimisation problem?

Notation:
- \\( C \\) is the communication cost
# Choices
- A: \\min C
- B: \\min f
- C: \\min C
\\quad \\text{s.t.} \\quad f_i \\leq 1
- D: \\min \\theta C
\\quad \\text{s.t.} \\quad f_i \\leq 2
# Answer
C
"""
# LongBench v2's prompts/0shot.txt (THUDM/LongBench 2e00731), with this item's fields, written out by hand.
EXPECTED_PROMPT = (
    "Please read the following text and answer the question below.\n\n<text>\nsource code\n</text>\n\n"
    "What is the correct answer to this question: Which optimisation problem?\n\nNotation:\n"
    "- \\( C \\) is the communication cost\nChoices:\n(A) \\min C\n(B) \\min f\n"
    "(C) \\min C\n\\quad \\text{s.t.} \\quad f_i \\leq 1\n(D) \\min \\theta C\n"
    "\\quad \\text{s.t.} \\quad f_i \\leq 2\n\n"
    'Format your response as follows: "The correct answer is (insert answer here)".'
)


def test_multi_line_choices_keep_every_line(tmp_path):
    (tmp_path / "s.md").write_text(MULTILINE)
    item = parse_item(tmp_path / "s.md")
    assert item.choices["C"] == "\\min C\n\\quad \\text{s.t.} \\quad f_i \\leq 1"
    assert item.choices["C"] != item.choices["A"] and item.choices["D"].endswith("\\leq 2")
    assert "Notation:" in item.question


def test_paper_protocol_sends_longbench_prompt_and_scores_with_extract_answer(tmp_path):
    (tmp_path / "s.md").write_text(MULTILINE)
    (tmp_path / "s_context.txt").write_text("\n  source code  \n\n")
    task = CodeQATask(tmp_path)
    [instance] = task.generate(272_000, 50, seed=0)
    assert instance.direct_messages() == [{"role": "user", "content": EXPECTED_PROMPT}]
    assert instance.context == "source code" and instance.direct_prompt is None
    assert instance.question.startswith("What is the correct answer to this question: Which optimisation")
    assert instance.metadata["tokens"] == count_tokens(EXPECTED_PROMPT)
    assert task.score("The correct answer is (C)", instance) == 1.0
    # LongBench's extract_answer gives nothing for a bare letter.
    assert task.score("**C**", instance) == 0.0


def test_a_placeholder_inside_the_context_is_replaced_as_the_original_replaces_it(tmp_path):
    (tmp_path / "s.md").write_text(MULTILINE)
    (tmp_path / "s_context.txt").write_text("print('$Q$')")
    [instance] = CodeQATask(tmp_path).generate(272_000, 1, seed=0)
    assert instance.direct_prompt is not None
    assert "print('Which optimisation problem?\n\nNotation:" in instance.direct_prompt


def test_middle_truncation_keeps_the_first_and_last_halves(tmp_path):
    (tmp_path / "s.md").write_text(MULTILINE)
    (tmp_path / "s_context.txt").write_text("".join(f"line {i}\n" for i in range(3000)))
    [full] = CodeQATask(tmp_path).generate(2048, 1, seed=0)
    [cut] = CodeQATask(tmp_path, truncate=True).generate(2048, 1, seed=0)
    assert full.direct_prompt is None and cut.metadata["truncated"]
    prompt = cut.direct_messages()[0]["content"]
    assert abs(count_tokens(prompt) - 2048) <= 2  # decoding at the seam can merge a token or two
    assert prompt.startswith("Please read the following text") and "line 0\n" in prompt
    assert prompt.endswith('"The correct answer is (insert answer here)".') and "line 1500\n" not in prompt
    [fits] = CodeQATask(tmp_path, truncate=True).generate(1_000_000, 1, seed=0)
    assert fits.direct_prompt is None and not fits.metadata["truncated"]


def test_inventory_lists_lengths_and_counts_what_is_missing(tmp_path):
    write_item(tmp_path, "sample_001_easy_short", "B", 10)
    write_item(tmp_path, "sample_010_easy_long", "A", 20)
    found = inventory(tmp_path)
    assert [(item.stem, size) for item, size, _ in found.items] == [
        ("sample_001_easy_short", 290),
        ("sample_010_easy_long", 580),
    ]
    assert found.items[0][2] == count_tokens("def parse_config():\n    pass\n" * 10)
    assert found.missing == 48
    assert "sample_010_easy_long" not in found.missing_known and len(found.missing_known) == 18


@pytest.mark.skipif(default_data_dir() is None, reason="the shared LongBench v2 CodeQA folder is absent")
def test_shared_folder_has_31_items_and_the_19_known_missing_ones_are_named():
    stems = {item.stem for item in load_items(default_data_dir())}
    assert len(stems) == 31 and stems.isdisjoint(KNOWN_MISSING) and len(KNOWN_MISSING) == 19
    # The item whose choice C runs over two lines (the first line alone is "\\min C").
    item = parse_item(default_data_dir() / "sample_262_hard_long.md")
    assert item.choices["C"].splitlines()[0].strip() == "\\min C" and len(item.choices["C"].splitlines()) == 2
    assert "\\quad \\text{s.t.}" in item.choices["C"] and "\\theta C" in item.choices["D"]
