import argparse
import io
import json

from rich.console import Console

from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.evals import add_parser
from rlm_adapters.evals.arms import ModelSetup
from rlm_adapters.evals.command import run_command


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
