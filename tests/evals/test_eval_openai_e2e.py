"""`rlm eval` configured like `rlm ask` (RLM_MODEL / OPENAI_BASE_URL), against the local fake server."""

import argparse
import json

import pytest

from rlm_adapters.cli.eval import add_parser
from rlm_adapters.testing import FakeOpenAIServer


def parse(argv):
    top = argparse.ArgumentParser(prog="rlm")
    add_parser(top.add_subparsers(dest="command"))
    return top.parse_args(argv)


@pytest.mark.slow
def test_eval_through_the_openai_client(fake_server: FakeOpenAIServer, tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_MODEL", "root-model")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    fake_server.root = [
        "```repl\nimport re\nfound = re.search(r'is: (\\d{7})', context).group(1)\nprint(found)\n```",
        "FINAL_VAR(found)",
    ]
    out = tmp_path / "ok"
    args = parse(
        [
            "eval",
            "sniah",
            "--lengths",
            "2k",
            "--n",
            "2",
            "--arms",
            "direct,rlm",
            "--out",
            str(out),
            "--environment",
            "local",
        ]
    )
    assert args.func(args) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["arm"] for r in records) == ["direct", "direct", "rlm", "rlm"]
    assert all(r["score"] == 1.0 and r["model"] == "root-model" for r in records)

    fake_server.fail_next(400, message="This model's maximum context length is 1000 tokens")
    limited = tmp_path / "limited"
    args = parse(["eval", "sniah", "--lengths", "2k", "--n", "1", "--arms", "direct", "--out", str(limited)])
    assert args.func(args) == 0
    record = json.loads((limited / "results.jsonl").read_text())
    assert (record["status"], record["score"]) == ("context_limit", 0.0)
    assert "1 (1 context limit)" in (limited / "report.md").read_text()


def test_compaction_model_and_the_oolong_layout_through_the_openai_client(fake_server, tmp_path, monkeypatch):
    monkeypatch.setenv("RLM_MODEL", "root-model")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    argv = ["eval", "sniah", "--lengths", "2k", "--n", "1", "--arms", "compaction", "--out", str(tmp_path / "c")]
    args = parse([*argv, "--compaction-model", "nano-model", "--context-window", "1024"])
    assert args.func(args) == 0
    models = [request["model"] for request in fake_server.requests_log]
    # Window-filling parts summarised by the compaction model, then one answer from the root model.
    assert models[-1] == "root-model" and set(models[:-1]) == {"nano-model"} and len(models) >= 3
    record = json.loads((tmp_path / "c" / "results.jsonl").read_text())
    assert record["settings"]["compaction_model"] == "nano-model" and record["settings"]["context_window"] == 1024

    fake_server.reset_counters()
    args = parse(["eval", "oolong", "--lengths", "2k", "--n", "1", "--arms", "direct", "--out", str(tmp_path / "o")])
    assert args.func(args) == 0
    [request] = fake_server.requests_log
    system, user = request["messages"]
    assert system["role"] == "system" and system["content"].startswith("You are a helpful assistant.\n\nThe following")
    assert user == {"role": "user", "content": json.loads((tmp_path / "o" / "results.jsonl").read_text())["question"]}
