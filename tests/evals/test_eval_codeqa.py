import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks.codeqa import CodeQATask, default_data_dir, load_items, parse_item

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


def test_items_parse_and_generate_prompts_in_longbench_format(tmp_path):
    write_item(tmp_path, "sample_001_easy_short", "B", 100)
    write_item(tmp_path, "sample_002_hard_short", "C", 2000, "hard")
    (tmp_path / "sample_003_easy_long.md").write_text(ITEM.format(answer="A", difficulty="easy"))  # no context
    assert [item.stem for item in load_items(tmp_path)] == ["sample_001_easy_short", "sample_002_hard_short"]
    task = CodeQATask(tmp_path)
    small = task.generate(4096, 5, seed=0)
    assert [x.gold for x in small] == ["B"]  # the other context has about 18k tokens
    instance = small[0]
    assert instance.question.startswith("What is the correct answer to this question: Which function")
    assert "(B) parse_config()" in instance.question
    assert "The correct answer is (insert answer here)" in instance.question
    assert instance.length == 4096 and 0 < instance.metadata["tokens"] <= 4096
    assert task.score("The correct answer is (B)", instance) == 1.0
    assert task.score("**B**", instance) == 1.0
    assert task.score("The correct answer is (A)", instance) == 0.0
    both = task.generate(32768, 5, seed=0)
    assert sorted(x.gold for x in both) == ["B", "C"]
    assert [x.id for x in task.generate(32768, 5, seed=0)] == [x.id for x in both]


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
