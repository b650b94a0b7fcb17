import argparse
import io
import json
import shlex
from pathlib import Path

import pytest
from rich.console import Console

from rlm_adapters.cli import main
from rlm_adapters.cli.eval import add_parser, run_command
from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.arms import ModelSetup


def parser():
    top = argparse.ArgumentParser(prog="rlm")
    add_parser(top.add_subparsers(dest="command"))
    return top


def test_the_issues_command_line_parses():
    args = parser().parse_args(
        [
            "eval",
            "oolong",
            "--model",
            "gpt-5-mini",
            "--sub-model",
            "gpt-5-nano",
            "--lengths",
            "8k,32k,131k",
            "--n",
            "25",
            "--arms",
            "direct,rlm",
        ]
    )
    assert (args.task, args.model, args.sub_model, args.lengths, args.n, args.arms) == (
        "oolong",
        "gpt-5-mini",
        "gpt-5-nano",
        "8k,32k,131k",
        25,
        "direct,rlm",
    )
    assert args.func.__name__ == "handle" and args.seed == 0 and args.out is None


def run(argv, tmp_path, root, capsys=None):
    args = parser().parse_args(["eval", *argv, "--out", str(tmp_path), "--environment", "local"])
    out = io.StringIO()
    factory = lambda options, **settings: ModelSetup(root=root, **settings)  # noqa: E731
    return run_command(args, make_setup=factory, console=Console(file=out, width=200)), out.getvalue()


def test_run_writes_results_reports_and_a_table(tmp_path, sniah_root, capsys):
    root = ScriptedModel(sniah_root, model_name="scripted-root")
    code, table = run(
        ["sniah", "--model", "x", "--lengths", "2k", "--n", "2", "--arms", "direct,rlm-depth0"],
        tmp_path,
        root,
    )
    assert code == 0
    assert "direct" in table and "rlm-depth0" in table and "1.000" in table
    assert {p.name for p in tmp_path.iterdir()} == {
        "results.jsonl",
        "calls.sqlite",  # every reply, so that an instance killed mid-run resumes mid-run
        "summary.json",
        "report.md",
        "score_vs_length.png",
    }
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4
    assert json.loads((tmp_path / "summary.json").read_text())["meta"]["model"] == "scripted-root"
    # A rerun resumes: nothing is called again, and stderr says so.
    again = ScriptedModel(sniah_root, model_name="scripted-root")
    assert (
        run(
            ["sniah", "--model", "x", "--lengths", "2k", "--n", "2", "--arms", "direct,rlm-depth0"],
            tmp_path,
            again,
        )[0]
        == 0
    )
    assert again.calls == [] and "resuming: 4 of 4" in capsys.readouterr().err


def test_configuration_errors_exit_2_with_the_reason(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RLM_MODEL", raising=False)
    root = ScriptedModel(["unused"])
    assert run(["sniah", "--lengths", "2k"], tmp_path, root)[0] == 2
    assert "no model configured" in capsys.readouterr().err
    assert run(["sniah", "--model", "x", "--arms", "rlm9"], tmp_path, root)[0] == 2
    assert "unknown arm 'rlm9'" in capsys.readouterr().err
    assert run(["sniah", "--model", "x", "--lengths", "tiny"], tmp_path, root)[0] == 2
    assert run(["codeqa", "--model", "x", "--data-dir", str(tmp_path / "none")], tmp_path, root)[0] == 2
    assert root.calls == []


def write_codeqa_item(folder, stem="sample_001_easy_short"):
    (folder / f"{stem}.md").write_text(
        "# Metadata\n- Difficulty: easy\n- Length: short\n# Question\nWhich?\n# Choices\n"
        "- A: a\n- B: b\n- C: c\n- D: d\n# Answer\nB\n"
    )
    (folder / f"{stem}_context.txt").write_text("def f():\n    return 1\n" * 50)


def test_the_report_names_the_models(tmp_path, sniah_root):
    root = ScriptedModel(sniah_root, model_name="scripted-root")
    code, table = run(["sniah", "--model", "x", "--lengths", "2k", "--n", "2", "--arms", "direct"], tmp_path, root)
    assert code == 0 and "rlm eval sniah" in table
    assert "- **model**: scripted-root" in (tmp_path / "report.md").read_text()
    meta = json.loads((tmp_path / "summary.json").read_text())["meta"]
    assert meta["sub_model"] is None and meta["compaction_model"] == "scripted-root"


@pytest.mark.parametrize("flag", [["--protocol", "legacy"], ["--scoring", "lenient"], ["--protocol", "paper"]])
def test_the_removed_protocol_and_scoring_flags_are_refused_in_one_line(flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["eval", "sniah", "--model", "x", *flag])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"rlm eval: unknown flag {flag[0]}; "), err
    assert "Traceback" not in err and not (tmp_path / "rlm-eval").exists()


def test_paper_defaults_fifty_instances_and_a_known_window(tmp_path):
    args = parser().parse_args(["eval", "oolong", "--model", "gpt-5"])
    assert args.n is None and args.lengths is None
    seen = {}

    def factory(options, **settings):
        seen.update(settings)
        raise ConfigurationError("stop here")

    args.out = tmp_path
    assert run_command(args, make_setup=factory) == 2
    assert seen["context_window"] == 272_000  # GPT-5's window, from the table of known models


def test_compaction_without_a_window_exits_2_naming_the_flag(tmp_path, capsys):
    root = ScriptedModel(["unused"], model_name="my-model")
    code, _ = run(["oolong", "--model", "x", "--arms", "compaction", "--n", "1"], tmp_path, root)
    assert code == 2 and "pass --context-window" in capsys.readouterr().err and root.calls == []


def test_codeqa_list_shows_items_lengths_and_what_is_missing(tmp_path):
    write_codeqa_item(tmp_path)
    args = parser().parse_args(["eval", "codeqa", "--list", "--data-dir", str(tmp_path)])
    out = io.StringIO()
    assert run_command(args, console=Console(file=out, width=200)) == 0
    text = out.getvalue()
    assert "sample_001_easy_short" in text and "1,100" in text
    assert "1 of 50 LongBench v2 code-repository items present; 49 missing" in text


def test_reproduce_table1_writes_the_papers_figures_beside_the_run(tmp_path):
    data = tmp_path / "codeqa"
    data.mkdir()
    write_codeqa_item(data)
    root = ScriptedModel(["The correct answer is (B)"], model_name="scripted-root")
    argv = ["reproduce", "--table1", "--model", "x", "--sub-model", "y", "--n", "2", "--arms", "direct,compaction"]
    rows = tmp_path / "rows.jsonl"
    row = {"context_len": 131_072, "dataset": "trec_coarse", "answer_type": "ANSWER_TYPE.LABEL"}
    rows.write_text(json.dumps({**row, "context_window_text": "W", "question": "Q", "answer": "['entity']"}) + "\n")
    argv += ["--context-window", "200000", "--data-dir", str(data), "--oolong-rows", str(rows)]
    code, table = run(argv, tmp_path / "out", root)
    assert code == 0 and "Table 1 rows" in table
    report = (tmp_path / "out" / "table1.md").read_text()
    for column in ("## CodeQA (23K-4.2M)", "## OOLONG (131K)", "## OOLONG-Pairs (32K)"):
        assert column in report
    assert "| RLM (`rlm`) | not run | 62.00 ($0.11 ± $0.10) | 56.00 ($0.92 ± $1.23) |" in report
    assert (
        "| Base Model (`direct`) | 100.00 [100.0, 100.0] ($0.00 ± $0.00; p50/p90 $0.00/$0.00, 0s/0s), n=1x1 | "
        "24.00* ($0.13 ± $0.07)"
    ) in report
    assert "**BrowseComp-Plus (1K)**" in report and "**CodeAct (+ BM25)**" in report
    assert "CodeQA ran 1 of the paper's 50 items" in report
    assert "- **model**: scripted-root" in report and "- **context_window**: 200000" in report
    assert f"- **oolong**: exported rows from {rows}" in report
    for task, count in (("codeqa", 2), ("oolong", 2), ("oolong-pairs", 4)):
        assert len((tmp_path / "out" / task / "results.jsonl").read_text().splitlines()) == count
    # One item, one exported OOLONG row and two pair queries, each sent once by each arm (the window fits).
    assert len(root.calls) == 2 + 2 + 4
    assert root.calls[2] == [
        {"role": "system", "content": "You are a helpful assistant.\n\nW"},
        {"role": "user", "content": "Q"},
    ]


def test_the_docs_eval_commands_parse():
    page = (Path(__file__).resolve().parents[2] / "docs" / "evals.md").read_text()
    commands = [line for line in page.splitlines() if line.startswith("rlm eval ")]
    assert len(commands) == 2
    for command in commands:
        args = parser().parse_args(shlex.split(command)[1:])
        assert args.func.__name__ == "handle" and args.model == "gpt-5"
    assert args.task == "reproduce" and args.table1 and args.compaction_model == "gpt-5-nano"
