"""`rlm eval` killed mid-instance resumes mid-instance: its cache in the output folder replays what came back."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from rlm_adapters.cli.eval import add_parser, run_command
from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.core.pricing import PriceTable
from rlm_adapters.evals.arms import ModelSetup
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer, kill_when, second_batch

RLM_BIN = shutil.which("rlm")
pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
ARGS = ["eval", "sniah", "--n", "2", "--lengths", "2k", "--arms", "rlm", "--concurrency", "1", "--environment", "local"]


def env_for(server: LedgerServer) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_", "ANTHROPIC_"))}
    return {**clean, "RLM_MODEL": "root-model", "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "t"}


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_a_killed_eval_resumes_its_instance_mid_run_and_a_third_run_asks_nothing(tmp_path: Path) -> None:
    assert RLM_BIN is not None
    out = tmp_path / "out"
    with LedgerServer(root=BATCHES, latency=0.2) as server:
        batches_seen = [0]

        def second_instance_mid_run(request: dict[str, Any]) -> bool:
            # Instance 1's second batch is six requests; the seventh is instance 2's, with its first turns back.
            batches_seen[0] += second_batch(request)
            return batches_seen[0] == 7

        command = [RLM_BIN, *ARGS, "--out", str(out)]
        first = subprocess.Popen(command, cwd=tmp_path, env=env_for(server), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        answered = kill_when(server, first, second_instance_mid_run)
        assert first.returncode == -9
        assert [r["answer"] for r in records(out)] == [BATCHES_ANSWER]  # instance 1 was recorded
        assert len(answered) == 15 + 8  # instance 1 whole, then instance 2's first turn, batch and second turn

        server.forget()
        resumed = subprocess.run(command, cwd=tmp_path, env=env_for(server), capture_output=True, text=True,
                                 timeout=300)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        assert "resuming: 1 of 2 already done" in resumed.stderr
        assert not set(server.arrived) & set(answered), "a call that had come back before the kill was paid again"
        assert len(server.arrived) == 7  # instance 2's cut-off batch and its last turn
        both = records(out)
        assert [r["answer"] for r in both] == [BATCHES_ANSWER, BATCHES_ANSWER]
        # The resumed record says what it replayed, and costs what its calls cost when they were paid.
        assert both[1]["extra"]["cached_calls"] == 8 and both[1]["calls"] == 15

        server.forget()
        third = subprocess.run(command, cwd=tmp_path, env=env_for(server), capture_output=True, text=True,
                               timeout=300)  # fmt: skip
        assert third.returncode == 0 and server.arrived == []


@pytest.mark.slow
def test_no_cache_keeps_none_and_a_foreign_file_in_the_folder_is_refused(tmp_path: Path) -> None:
    assert RLM_BIN is not None
    with LedgerServer(root=["FINAL(7)"]) as server:
        plain = tmp_path / "plain"
        done = subprocess.run([RLM_BIN, *ARGS, "--out", str(plain), "--no-cache"], cwd=tmp_path,
                              env=env_for(server), capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert not (plain / "calls.sqlite").exists() and len(records(plain)) == 2
        taken = tmp_path / "taken"
        taken.mkdir()
        (taken / "calls.sqlite").write_text("someone else's notes")
        refused = subprocess.run([RLM_BIN, *ARGS, "--out", str(taken)], cwd=tmp_path, env=env_for(server),
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(f"rlm eval: --out {str(taken)!r}") and "--no-cache" in refused.stderr
        assert (taken / "calls.sqlite").read_text() == "someone else's notes"


def _run_in_process(out: Path, root: Any, arms: str) -> int:
    top = argparse.ArgumentParser(prog="rlm")
    add_parser(top.add_subparsers(dest="command"))
    argv = ["eval", "sniah", "--model", "x", "--n", "2", "--lengths", "2k", "--arms", arms, "--out", str(out)]
    argv += ["--environment", "local"]
    price = {"scripted-root": (1.0, 2.0)}

    def factory(options: dict[str, Any], **settings: Any) -> ModelSetup:
        settings["rlm_kwargs"] = {**settings["rlm_kwargs"], "prices": price}  # the engine's arms
        return ModelSetup(root=root, prices=PriceTable(price), **settings)  # the baselines

    return run_command(top.parse_args(argv), make_setup=factory, console=Console(file=io.StringIO()))


def test_each_arm_and_instance_is_its_own_scope_and_a_lost_record_is_rebuilt_for_free(tmp_path: Path) -> None:
    # Every RLM run asks its sub-model the same prompt: across instances and arms these are separate calls.
    script = ["```repl\nprint(llm_query('the same question everywhere'))\n```", "FINAL(7)"]

    def reply(messages: list[dict[str, Any]]) -> str:
        if messages[0]["role"] == "system":
            return script[min(sum(m["role"] == "assistant" for m in messages), 1)]
        return "a sampled answer"

    first = ScriptedModel(reply, model_name="scripted-root")
    assert _run_in_process(tmp_path, first, "direct,rlm") == 0
    sub_calls = [c for c in first.calls if c[0]["content"] == "the same question everywhere"]
    assert len(sub_calls) == 2  # one per instance, not one reply shared by both
    paid = {(r["arm"], r["instance"]): r for r in records(tmp_path)}
    # The results file is lost (or was never flushed): the rerun rebuilds every record from the cache.
    (tmp_path / "results.jsonl").unlink()
    again = ScriptedModel(reply, model_name="scripted-root")
    assert _run_in_process(tmp_path, again, "direct,rlm") == 0
    assert again.calls == []
    for record in records(tmp_path):
        before = paid[(record["arm"], record["instance"])]
        assert record["answer"] == before["answer"] and before["cost"] > 0
        assert record["cost"] == pytest.approx(before["cost"])
        assert record["extra"]["cached_calls"] == record["calls"] == before["calls"]
