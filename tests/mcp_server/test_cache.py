"""``rlm-mcp --cache``: a server killed with SIGKILL mid-call, restarted with the same cache, answers the
repeated call without paying again for any model call that had come back before the kill."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm_adapters.mcp_server.__main__ import main
from tests.extras import needs
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer, kill_when, second_batch
from tests.mcp_server.conftest import server_env
from tests.mcp_server.test_http import TOKEN, connect, free_port, stop

QUESTION = {"query": "Add up the magic numbers.", "paths": ["notes.txt"]}


@pytest.fixture
def ledger() -> Iterator[LedgerServer]:
    with LedgerServer(root=BATCHES, latency=0.3) as running:
        yield running


@contextlib.contextmanager
def cached_server(
    workspace: Path, env: dict[str, str], cache: Path | None, *flags: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``rlm-mcp --http --cache`` (or `flags`' store) in a process group of its own (so that a SIGKILL takes its
    sandboxes too)."""
    port = free_port()
    argv = ["--http", "--port", str(port), "--root", str(workspace), "--token", TOKEN, *flags]
    argv += ["--cache", str(cache)] if cache is not None else []
    process = subprocess.Popen(
        [sys.executable, "-m", "rlm_adapters.mcp_server", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # another process: nothing to await, so try to connect until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "rlm-mcp --http did not start"
                time.sleep(0.05)
        yield process, f"http://127.0.0.1:{port}/mcp"
    finally:
        if process.poll() is None:
            stop(process)
        elif process.stderr is not None:
            process.stderr.close()


@pytest.mark.timeout(400)
@pytest.mark.slow
async def test_a_server_killed_mid_call_resumes_the_repeated_call_from_the_cache(
    workspace: Path, ledger: LedgerServer, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text("a long document\n" * 100, encoding="utf-8")
    # Models with list prices: the resume note gives what the replayed calls had cost.
    env = server_env(ledger, tmp_path / "logs") | {"RLM_MODEL": "gpt-5", "RLM_SUB_MODEL": "gpt-5-mini"}
    cache = tmp_path / "state" / "calls.sqlite"
    with cached_server(workspace, env, cache) as (process, url):
        async with connect(url, mode="legacy", token=TOKEN) as client:
            call = asyncio.create_task(client.call(**QUESTION))
            # Killed with its sandboxes once the second batch is in flight: everything before it came back.
            answered = await asyncio.to_thread(kill_when, ledger, process, second_batch)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(call, 30)  # the connection is gone: the call fails, however the SDK says it
    assert process.returncode == -9
    assert len(answered) == 8  # the first root turn, its six sub-calls, the second root turn
    assert cache.stat().st_mode & 0o777 == 0o600

    ledger.forget()
    with cached_server(workspace, env, cache) as (_process, url):
        async with connect(url, mode="legacy", token=TOKEN) as client:
            resumed = await client.call(**QUESTION)
    assert resumed.structured_content["answer"] == BATCHES_ANSWER
    assert not set(ledger.arrived) & set(answered), "a call that had come back before the kill was paid again"
    assert len(ledger.arrived) == 7  # the six sub-calls cut off by the kill, and the last root turn
    # Said once in the result, lean as it is: how many calls came from the cache and what they had cost.
    note = resumed.structured_content["resumed"]
    assert note.startswith(f"resumed: 8 of 15 model calls from {cache.name}, $") and note.endswith(" not paid again")
    assert float(note.split("$")[1].split()[0]) > 0, note

    ledger.forget()
    with cached_server(workspace, env, cache) as (_process, url):
        async with connect(url, mode="auto", token=TOKEN) as client:
            third = await client.call(**QUESTION)
    assert third.structured_content["answer"] == BATCHES_ANSWER
    assert ledger.arrived == [], "a third run replays every call"


def test_a_file_that_is_not_a_cache_is_refused_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "notes.sqlite"
    foreign.write_text("my own notes, not a cache\n")
    assert main(["--root", str(tmp_path), "--cache", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlm-mcp: --cache {str(foreign)!r} ") and err.endswith("give another file\n")
    assert err.count("\n") == 1
    assert foreign.read_text() == "my own notes, not a cache\n"


def test_cache_and_no_cache_contradict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path), "--cache", "c.sqlite", "--no-cache"]) == 2
    assert capsys.readouterr().err == "rlm-mcp: --cache and --no-cache contradict each other: give one\n"


@pytest.mark.timeout(400)
@needs("psycopg", "store")
async def test_a_call_repeated_on_another_server_on_the_same_store_pays_nothing(
    workspace: Path, ledger: LedgerServer, tmp_path: Path, store_url: str
) -> None:
    """``rlm-mcp --store postgresql://...``: two servers, one store (issue 52)."""
    (workspace / "notes.txt").write_text("a long document\n" * 100, encoding="utf-8")
    env = server_env(ledger, tmp_path / "logs")
    with (
        cached_server(workspace, env, None, "--store", store_url) as (_one, first_url),
        cached_server(workspace, env, None, "--store", store_url) as (_two, second_url),
    ):
        async with connect(first_url, mode="legacy", token=TOKEN) as client:
            first = await client.call(**QUESTION)
        assert first.structured_content["answer"] == BATCHES_ANSWER
        assert len(ledger.arrived) == 15
        ledger.forget()
        async with connect(second_url, mode="legacy", token=TOKEN) as client:
            second = await client.call(**QUESTION)
    assert second.structured_content["answer"] == BATCHES_ANSWER
    assert ledger.arrived == [], "the second server paid for replies the store held"
    assert second.structured_content["resumed"].startswith("resumed: 15 of 15 model calls from the call cache")


def test_store_and_cache_contradict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path), "--cache", "c.sqlite", "--store", "postgresql://h/db"]) == 2
    assert capsys.readouterr().err == "rlm-mcp: --store and --cache contradict each other: give one\n"
