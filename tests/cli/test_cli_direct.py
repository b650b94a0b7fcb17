"""``rlm ask --direct-below-tokens`` (issue 50): a short input is one plain call whose answer is printed as it
streams in; a bad value is one line naming the flag; the JSON result says the route."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.cli.test_cli import run_rlm, server_env

pytestmark = pytest.mark.skipif(shutil.which("rlm") is None, reason="the rlm console script is not installed")
REPLY = "The note says the sky was green \x1b[31m that evening."


def test_a_short_input_is_answered_by_one_plain_call(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("the sky was green that evening\n")
    fake_server.leaf = lambda prompt: REPLY
    env = server_env(fake_server)
    done = run_rlm(["ask", "-c", "note.txt", "--direct-below-tokens", "1000", "What colour?"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    # Printed as it streamed in, escaped piece by piece as the whole answer would be, once, then a newline.
    assert done.stdout == "The note says the sky was green \\x1b[31m that evening.\n"
    assert fake_server.counters.requests == 1 and fake_server.counters.root_requests == 0
    done = run_rlm(["ask", "-c", "note.txt", "--direct-below-tokens", "1000", "--json", "What colour?"], env, tmp_path)
    result = json.loads(done.stdout)
    assert result["response"] == REPLY and result["metadata"]["route"] == "direct"


def test_with_sources_the_block_follows_the_streamed_answer(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("the sky was green that evening\n")
    fake_server.leaf = lambda prompt: "the sky was green that evening"
    args = ["ask", "-c", "note.txt", "--direct-below-tokens", "1000", "--sources", "What colour?"]
    done = run_rlm(args, server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the sky was green that evening\n\nSources:")
    assert done.stdout.count("the sky was green that evening") >= 1 and "note.txt:1" in done.stdout


@pytest.mark.parametrize("bad", ["0", "-1", "lots"])
def test_a_bad_threshold_is_one_line_naming_the_flag(fake_server: FakeOpenAIServer, tmp_path: Path, bad: str) -> None:
    (tmp_path / "a.txt").write_text("x")
    done = run_rlm(["ask", "-c", "a.txt", f"--direct-below-tokens={bad}", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2 and "argument --direct-below-tokens:" in done.stderr
    assert fake_server.counters.requests == 0
