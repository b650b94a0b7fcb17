"""`rlm eval` configured like `rlm ask` (RLM_MODEL / OPENAI_BASE_URL), against the local fake server."""

import argparse
import json

from rlm_adapters.evals import add_parser
from rlm_adapters.testing import FakeOpenAIServer


def parse(argv):
    top = argparse.ArgumentParser(prog="rlm")
    add_parser(top.add_subparsers(dest="command"))
    return top.parse_args(argv)


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
