"""Eval data that ``--data-dir`` names (issue 24, defect 15).

A malformed gold answer is refused in one line naming the file and the row, before any model is called
(it used to pass loading and raise a traceback from the scorer, after the calls were paid), and a CodeQA file
that is a link is never read, so nothing it leads to reaches a model.
"""

import json
import os
from pathlib import Path

import pytest

from rlm_adapters.cli import main
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks.data_files import present, read_text
from rlm_adapters.testing import FakeOpenAIServer

ROW = {
    "context_window_text": "W",
    "question": "Q",
    "answer": "['entity']",
    "answer_type": "ANSWER_TYPE.LABEL",
    "context_len": 2048,
    "dataset": "trec_coarse",
}
ITEM = (
    "# Metadata\n- Difficulty: easy\n- Length: short\n# Question\nWhich function parses the config?\n# Choices\n"
    "- A: load()\n- B: parse_config()\n- C: main()\n- D: run()\n# Answer\nB\n"
)
SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- planted-secret"


@pytest.fixture
def model_env(fake_server: FakeOpenAIServer, monkeypatch, tmp_path) -> FakeOpenAIServer:
    monkeypatch.setenv("RLM_MODEL", "root-model")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.chdir(tmp_path)
    return fake_server


def rlm_eval(argv: list[str], capsys) -> tuple[int, str]:
    code = main(["eval", *argv])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"answer": "entity"}, "answer 'entity' is not an oolong-synth gold answer"),
        ({"answer": "'entity'"}, "is not an oolong-synth gold answer"),  # a string: the scorer would take 'e'
        ({"answer": "[]"}, "answer '[]' is not an oolong-synth gold answer"),
        ({"answer": "{'a': 1}"}, "is not an oolong-synth gold answer"),
        ({"answer": "[datetime.date(2024, 13, 1)]"}, "is not an oolong-synth gold answer"),
        ({"answer": "[" * 400}, "is not an oolong-synth gold answer"),
        ({"answer": "['" + "x" * 5000 + "']"}, "is not an oolong-synth gold answer"),
        ({"answer": ["entity"]}, "answer must be a string, got ['entity']"),
        ({"answer": "['many']", "answer_type": "ANSWER_TYPE.NUMERIC"}, "answer must hold an integer"),
        ({"context_len": "2k"}, "context_len must be an integer, got '2k'"),
        ({"id": 1.5}, "id must be an integer, got 1.5"),
    ],
)
def test_a_malformed_row_is_refused_in_one_line_naming_the_file_and_row(change, says, model_env, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(ROW) + "\n\n" + json.dumps({**ROW, **change}) + "\n")
    code, err = rlm_eval(["oolong", "--data-dir", str(rows), "--lengths", "2k", "--arms", "direct"], capsys)
    assert code == 2 and "Traceback" not in err
    [line] = err.splitlines()
    assert line.startswith(f"rlm eval: {str(rows)!r} line 3") and says in line, line
    assert len(line) < 400 and model_env.requests_log == []


def test_a_row_that_is_not_an_object_and_an_array_file_name_their_row(model_env, tmp_path, capsys):
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([ROW, ROW, [1, 2]]))
    code, err = rlm_eval(["oolong", "--data-dir", str(rows), "--lengths", "2k"], capsys)
    assert code == 2 and err.splitlines() == [
        f"rlm eval: {str(rows)!r} row 3 is not an oolong-synth row (a JSON object), got [1, 2]"
    ]
    rows.write_bytes(b'[{"answer": "\xff"}]')
    code, err = rlm_eval(["oolong", "--data-dir", str(rows), "--lengths", "2k"], capsys)
    assert code == 2 and err.splitlines() == [
        f"rlm eval: oolong-synth rows file {str(rows)!r} is not UTF-8 text (byte 13 is not)"
    ]


def test_reproduce_refuses_malformed_rows_it_was_given_before_any_call(model_env, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({**ROW, "answer": "entity"}) + "\n")
    code, err = rlm_eval(["reproduce", "--table1", "--oolong-rows", str(rows), "--context-window", "200000"], capsys)
    assert code == 2 and f"{str(rows)!r} line 1: answer 'entity'" in err.splitlines()[-1]
    assert "Traceback" not in err and model_env.requests_log == [] and not (tmp_path / "rlm-eval").exists()


def write_item(folder: Path, stem: str) -> None:
    (folder / f"{stem}.md").write_text(ITEM)
    (folder / f"{stem}_context.txt").write_text("def parse_config():\n    pass\n" * 20)


@pytest.mark.parametrize("linked", ["context", "question", "inside"])
def test_a_codeqa_file_that_is_a_link_is_refused_and_reaches_no_model(linked, model_env, tmp_path, capsys):
    outside = tmp_path / "home" / ".ssh"
    outside.mkdir(parents=True)
    (outside / "id_rsa").write_text(SECRET + "\n")
    (outside / "q.md").write_text(ITEM.replace("Which function", SECRET))
    data = tmp_path / "data"
    data.mkdir()
    write_item(data, "sample_001_easy_short")
    write_item(data, "sample_002_easy_short")
    planted = data / ("sample_002_easy_short_context.txt" if linked != "question" else "sample_002_easy_short.md")
    planted.unlink()
    targets = {"context": outside / "id_rsa", "question": outside / "q.md", "inside": data / "sample_001_easy_short.md"}
    planted.symlink_to(targets[linked])
    argv = ["codeqa", "--data-dir", str(data), "--arms", "direct", "--n", "2", "--out", str(tmp_path / "out")]
    code, err = rlm_eval(argv, capsys)
    assert code == 2 and "Traceback" not in err
    [line] = err.splitlines()
    assert f"{str(planted)!r} is a symbolic link; --data-dir files must be regular files" in line
    assert SECRET not in err and model_env.requests_log == []
    code, err = rlm_eval(["codeqa", "--list", "--data-dir", str(data)], capsys)
    assert code == 2 and "is a symbolic link" in err and SECRET not in err
    # Without the link the same folder runs, and what it holds does reach the model: the log would show it.
    planted.unlink()
    if linked == "question":
        (data / "sample_002_easy_short_context.txt").unlink()
    code, err = rlm_eval(argv, capsys)
    sent = json.dumps(model_env.requests_log)
    assert code == 0 and "def parse_config" in sent and SECRET not in sent


def test_a_fifo_or_a_folder_is_refused_without_hanging(tmp_path):
    os.mkfifo(tmp_path / "pipe_context.txt")
    (tmp_path / "dir_context.txt").mkdir()
    with pytest.raises(ConfigurationError, match="is not a regular file"):
        present(tmp_path, "pipe_context.txt", "CodeQA context")
    with pytest.raises(ConfigurationError, match="is not a regular file"):
        read_text(tmp_path, "pipe_context.txt", "CodeQA context")  # O_NONBLOCK: no writer, no wait
    with pytest.raises(ConfigurationError, match="is a folder"):
        read_text(tmp_path, "dir_context.txt", "CodeQA context")
    assert present(tmp_path, "absent_context.txt", "CodeQA context") is False


def test_an_entry_swapped_for_a_link_after_it_was_listed_is_refused(tmp_path):
    (tmp_path / "secret").write_text(SECRET)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "c.txt").write_text("fine")
    assert present(tmp_path / "data", "c.txt", "CodeQA context")
    (tmp_path / "data" / "c.txt").unlink()
    (tmp_path / "data" / "c.txt").symlink_to(tmp_path / "secret")
    with pytest.raises(ConfigurationError, match="is a symbolic link") as refused:
        read_text(tmp_path / "data", "c.txt", "CodeQA context")
    assert SECRET not in str(refused.value)
    # The folder itself may be a link: the user named it.
    (tmp_path / "alias").symlink_to(tmp_path / "data")
    (tmp_path / "data" / "d.txt").write_text("fine")
    assert read_text(tmp_path / "alias", "d.txt", "CodeQA context") == "fine"


def test_a_hard_link_to_a_file_outside_is_refused(tmp_path):
    """Issue 35, item 7: a symbolic link was refused, a hard link read the file it names outside --data-dir."""
    (tmp_path / "data").mkdir()
    (tmp_path / "secret").write_text(SECRET)
    os.link(tmp_path / "secret", tmp_path / "data" / "c.txt")
    for check in (present, read_text):
        with pytest.raises(ConfigurationError, match=r"c.txt' is a hard link \(2 names share the file") as refused:
            check(tmp_path / "data", "c.txt", "CodeQA context")
        assert SECRET not in str(refused.value) and "\n" not in str(refused.value)
    (tmp_path / "secret").unlink()  # its only name now: a regular file of the folder
    assert read_text(tmp_path / "data", "c.txt", "CodeQA context") == SECRET
