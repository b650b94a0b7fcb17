"""Two programs (eval workers) running at once over one cache file: both finish, nothing is lost or damaged."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer

PROGRAM = """
import sys
from rlm_adapters import RLM

url, cache, context = sys.argv[1:4]
options = {"base_url": url, "api_key": "t", "max_retries": 0}
rlm = RLM(backend="openai", backend_kwargs={"model_name": "root-model", **options},
          other_backends=["openai"], other_backend_kwargs=[{"model_name": "leaf-model", **options}],
          environment="local", cache=cache)
result = rlm.completion(context, "Add up the magic numbers.")
print(result.response)
print(result.usage_summary.to_dict()["total"].get("cached_calls", 0), file=sys.stderr)
"""
CALLS = 3 + 12  # three root turns, two batches of six sub-calls


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_two_programs_sharing_one_cache_both_finish_and_a_rerun_of_each_is_free(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    cache = tmp_path / "calls.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_"))}
    # Two on one context (the same requests, raced) and one on another (its own), all at once.
    contexts = ["the first document", "the first document", "another document"]
    with LedgerServer(root=BATCHES, latency=0.05) as server:

        def start(context: str) -> subprocess.Popen[str]:
            command = [sys.executable, str(program), server.base_url, str(cache), context]
            return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        running = [start(context) for context in contexts]
        outcomes = [process.communicate(timeout=240) for process in running]
        assert [p.returncode for p in running] == [0, 0, 0], [err for _out, err in outcomes]
        assert [out.strip() for out, _err in outcomes] == [BATCHES_ANSWER] * 3

        with sqlite3.connect(cache) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            stored = db.execute("SELECT count(*) FROM calls").fetchone()[0]
        db.close()
        assert stored == 2 * CALLS  # one reply per request of each context, however the race went

        server.forget()
        again = [start(context) for context in dict.fromkeys(contexts)]
        replays = [process.communicate(timeout=240) for process in again]
        assert [p.returncode for p in again] == [0, 0]
        assert [out.strip() for out, _err in replays] == [BATCHES_ANSWER] * 2
        assert server.arrived == [], "a reply one of the programs had stored was paid for again"
        assert [err.strip().splitlines()[-1] for _out, err in replays] == [str(CALLS)] * 2
