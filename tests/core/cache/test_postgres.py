"""The call cache in PostgreSQL (issue 52, first slice), against a real server the tests start (`tests/postgres.py`).

Processes on one store share their replies (a run killed on one is resumed on another, paying only for what had
not come back); the schema is migrated once however many start together; each way a store cannot be used is one
line naming the URL without its password; a store that goes away mid-run costs the run nothing it had.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rlm_adapters import RLM, CachedReply, StoreError
from rlm_adapters.core.cache import PostgresCallCache, open_cache, shown_url
from rlm_adapters.core.cache.postgres_schema import LATEST, MIGRATIONS, migrate
from rlm_adapters.testing.fake_openai import Answer, Response
from tests.extras import hiding_env
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer, kill_when, second_batch
from tests.postgres import PASSWORD, PostgresServer

PROGRAM = """
import sys
import tempfile
from rlm_adapters import RLM

url, cache = sys.argv[1:3]
options = {"base_url": url, "api_key": "t", "max_retries": 0}
rlm = RLM(backend="openai", backend_kwargs={"model_name": "root-model", **options},
          other_backends=["openai"], other_backend_kwargs=[{"model_name": "leaf-model", **options}],
          environment="local", cache=cache)
result = rlm.completion("the first document", "Add up the magic numbers.")
print(result.response)
print(result.usage_summary.to_dict()["total"].get("cached_calls", 0), file=sys.stderr)
"""
CALLS = 3 + 12  # three root turns, two batches of six sub-calls


def _rows(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM rlm_calls").fetchone()
    assert row is not None
    return int(row[0])


def _versions(url: str) -> list[int]:
    with psycopg.connect(url) as connection:
        return [int(v) for (v,) in connection.execute("SELECT version FROM rlm_schema_version ORDER BY version")]


def test_two_stores_on_one_database_share_replies_and_the_first_stored_wins(store_url: str) -> None:
    first, second = PostgresCallCache(store_url), PostgresCallCache(store_url)
    try:

        async def use() -> tuple[Any, ...]:
            paid = CachedReply("the first", 10, 2, "m", 0.25)
            stored = await first.put("k", paid)
            raced = await second.put("k", CachedReply("a later one", 1, 1, "m", 0.5))
            return await second.get("k"), stored, raced, await first.get("missing")

        seen, stored, raced, missing = asyncio.run(use())
    finally:
        first.close()
        second.close()
    assert seen == stored == raced == CachedReply("the first", 10, 2, "m", 0.25)
    assert missing is None
    assert _versions(store_url) == [m.version for m in MIGRATIONS]


def test_a_run_killed_in_one_process_is_resumed_in_another_paying_only_what_had_not_come_back(
    store_url: str, tmp_path: Path
) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_"))}
    with LedgerServer(root=BATCHES, latency=0.05) as server:

        def start() -> subprocess.Popen[str]:
            command = [sys.executable, str(program), server.base_url, store_url]
            return subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
            )

        killed = start()
        answered = kill_when(server, killed, second_batch)
        assert len(answered) >= 7, "the first batch and its root turn came back before the kill"
        stored = _rows(store_url)
        assert stored >= len(answered) - 6  # replies still in flight at the kill may not have been kept

        server.forget()
        resumed = start()
        out, err = resumed.communicate(timeout=240)
        assert resumed.returncode == 0, err
        assert out.strip() == BATCHES_ANSWER
        assert len(server.arrived) == CALLS - stored, "each call the store held was replayed, not paid again"
        # Paid twice: only replies that had left the server but not reached the store when the process died.
        assert len(set(server.arrived) & set(answered)) == len(answered) - stored
        assert err.strip().splitlines()[-1] == str(stored)
        assert PASSWORD not in out + err

        server.forget()
        again = start()
        out, err = again.communicate(timeout=240)
        assert (again.returncode, out.strip()) == (0, BATCHES_ANSWER)
        assert server.arrived == [], "the third process paid for a reply the store holds"
        assert err.strip().splitlines()[-1] == str(CALLS)


def test_replicas_starting_together_migrate_the_schema_once(store_url: str) -> None:
    starting = 6
    barrier = threading.Barrier(starting)
    applied: list[list[int]] = []
    failures: list[BaseException] = []

    def start() -> None:
        try:
            with psycopg.connect(store_url, autocommit=True) as connection:
                barrier.wait(30)
                applied.append(migrate(connection))
        except BaseException as exc:  # collected for the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(starting)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    # Exactly one replica applied each step; the others found it done.
    assert sorted(v for versions in applied for v in versions) == [m.version for m in MIGRATIONS]
    assert _versions(store_url) == [m.version for m in MIGRATIONS]


def test_without_the_lock_replicas_starting_together_would_collide(store_url: str) -> None:
    """What the advisory lock prevents, shown: the same steps raced without it fail in some replica."""
    barrier = threading.Barrier(4)
    failures: list[BaseException] = []

    def start() -> None:
        try:
            with psycopg.connect(store_url, autocommit=True) as connection:
                barrier.wait(30)
                connection.execute(MIGRATIONS[0].statements[0].replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
        except psycopg.Error as exc:
            failures.append(exc)

    for _attempt in range(10):
        threads = [threading.Thread(target=start) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        if failures:
            break
        with psycopg.connect(store_url, autocommit=True) as connection:
            connection.execute("DROP TABLE rlm_calls")
        barrier.reset()
    assert failures, "ten unlocked races never collided: this test shows nothing on this machine"


def test_a_newer_schema_is_refused_in_one_line_and_left_as_it_is(store_url: str) -> None:
    PostgresCallCache(store_url).close()
    with psycopg.connect(store_url) as connection:
        connection.execute(
            "INSERT INTO rlm_schema_version (version, description) VALUES (%s, 'from the future')", (LATEST + 1,)
        )
    with pytest.raises(StoreError) as caught:
        PostgresCallCache(store_url)
    message = str(caught.value)
    assert message == (
        f"the store {shown_url(store_url)} holds schema version {LATEST + 1}, newer than this rlm-adapters knows "
        f"({LATEST}): upgrade rlm-adapters, or name another database"
    )
    assert _versions(store_url) == [*(m.version for m in MIGRATIONS), LATEST + 1]


def _bad_urls(postgres: PostgresServer, unused_port: int) -> dict[str, tuple[str, str]]:
    """Each bad store: its URL, and the words its one line must hold."""
    return {
        "unreachable": (postgres.url(port=unused_port), "cannot be reached"),
        "wrong password": (postgres.url(password="not-" + PASSWORD), "refused the password of user 'rlm'"),
        "no database": (postgres.url("no_such_db"), "has no database 'no_such_db': create it"),
    }


@pytest.fixture
def unused_port() -> int:
    from tests.postgres import free_port

    return free_port()


@pytest.mark.parametrize("case", ["unreachable", "wrong password", "no database"])
def test_a_store_that_cannot_be_used_is_one_line_without_the_password(
    postgres: PostgresServer, unused_port: int, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, words = _bad_urls(postgres, unused_port)[case]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreError) as caught:
        RLM(backend="openai", backend_kwargs={"model_name": "m", "api_key": "k"}, cache=url)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"the store {shown_url(url)} ")
    assert words in message
    assert "PASSWORD" not in message.upper() or "password of user" in message  # the word, never the secret
    assert PASSWORD not in message and PASSWORD not in caplog.text
    assert "@127.0.0.1" in message and ":" + PASSWORD not in message


def test_shown_url_drops_the_password_wherever_it_is() -> None:
    assert shown_url("postgresql://u:p%40ss@h:5432/db?sslmode=require") == "postgresql://u@h:5432/db?sslmode=require"
    assert shown_url("postgresql://u@h/db?password=x&sslmode=disable") == "postgresql://u@h/db?sslmode=disable"
    assert shown_url("postgresql://h/db") == "postgresql://h/db"


def test_a_store_url_of_another_kind_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError) as caught:
        open_cache(f"mysql://u:{PASSWORD}@h/db")
    assert "mysql://" in str(caught.value) and PASSWORD not in str(caught.value)


def test_sqlite_urls_name_the_embedded_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative, owned = open_cache("sqlite:///calls.sqlite")
    absolute, _ = open_cache(f"sqlite:///{tmp_path}/other.sqlite")
    assert owned and (tmp_path / "calls.sqlite").is_file() and (tmp_path / "other.sqlite").is_file()
    assert relative is not None and absolute is not None
    relative.close()
    absolute.close()


def _command_line(command: str, url: str, folder: Path) -> list[str]:
    """`python`'s arguments for `command` started on the store `url` (its roots and context: `folder`)."""
    return {
        "serve": ["-m", "rlm_adapters", "serve", "--port", "0", "--model", "m=gpt-x,price=1/1", "--store", url],
        "mcp": ["-m", "rlm_adapters.mcp_server", "--model", "gpt-x", "--store", url, "--root", str(folder)],
        "ask": ["-m", "rlm_adapters", "ask", "--model", "gpt-x", "--cache", url, "-c", str(folder), "hi"],
    }[command]


@pytest.mark.parametrize("command", ["serve", "mcp", "ask"])
def test_the_commands_say_a_bad_store_in_one_line_without_the_password(
    postgres: PostgresServer, command: str, tmp_path: Path
) -> None:
    url = postgres.url(password=PASSWORD + "-but-wrong")
    (tmp_path / "notes.txt").write_text("a context")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_"))}, "OPENAI_API_KEY": "k"}
    argv = _command_line(command, url, tmp_path)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert PASSWORD not in done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "the store" in line]
    assert len(lines) == 1, done.stderr
    # A password in a flag is in the process list: said once, pointing at libpq's own places for it.
    assert done.stderr.count("holds a password, which every local user can read") == 1
    assert "PGPASSWORD or ~/.pgpass" in done.stderr
    # (rlm ask's redaction also drops the user name from a URL in its messages.)
    assert f"127.0.0.1:{postgres.port}/postgres " in lines[0] and "refused the password of user 'rlm'" in lines[0]


def _on_the_store(base_url: str, store: str) -> RLM:
    """An RLM on the fake server (root and leaf model), its call cache in `store`."""
    options = {"base_url": base_url, "api_key": "t", "max_retries": 0}
    return RLM(
        backend="openai",
        backend_kwargs={"model_name": "root-model", **options},
        other_backends=["openai"],
        other_backend_kwargs=[{"model_name": "leaf-model", **options}],
        environment="local",
        cache=store,
    )


class _StopsTheStore(LedgerServer):
    """The fake OpenAI server that stops PostgreSQL when the second batch begins, before answering it."""

    def __init__(self, postgres: PostgresServer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.postgres = postgres
        self.stopped = False

    async def answer(
        self, model: str, messages: list[dict[str, Any]], options: dict[str, Any] | None = None
    ) -> Answer | Response:
        if not self.stopped and second_batch({"messages": messages}):
            self.stopped = True
            await asyncio.to_thread(self.postgres.stop)
        return await super().answer(model, messages, options)


@pytest.mark.timeout(180)
def test_a_store_that_goes_away_mid_run_costs_no_answer_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    own = PostgresServer()  # stopped by the test: not the session's server
    try:
        own.start()
        url = own.create_database("midrun")
        caplog.set_level(logging.DEBUG)
        with _StopsTheStore(own, root=BATCHES, latency=0.05) as server:
            rlm = _on_the_store(server.base_url, url)
            result = rlm.completion("the first document", "Add up the magic numbers.")
            rlm.close()
            assert (result.finish_reason, result.response) == ("final", BATCHES_ANSWER)
            assert server.stopped and len(server.arrived) == CALLS
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "call cache" in r.getMessage()]
            assert len(warnings) == 1, [r.getMessage() for r in warnings]
            assert "the run goes on without it" in warnings[0].getMessage()
            assert PASSWORD not in caplog.text

            # Back up: what was stored before it went away is replayed; only the rest is paid again.
            own.start()
            stored = _rows(url)
            assert stored >= 8  # the first root turn, its six sub-calls, the second root turn
            server.forget()
            again = _on_the_store(server.base_url, url)
            replayed = again.completion("the first document", "Add up the magic numbers.")
            again.close()
            assert replayed.response == BATCHES_ANSWER
            assert len(server.arrived) == CALLS - stored
    finally:
        own.remove()


def test_any_reply_a_provider_sends_round_trips_nul_and_lone_surrogates_included(store_url: str) -> None:
    odd = CachedReply("before\x00after \ud800 end", 1, 1, "model\x00name", 0.0)
    store = PostgresCallCache(store_url)
    try:

        async def use() -> tuple[Any, Any]:
            return await store.put("odd", odd), await store.get("odd")

        stored, read = asyncio.run(use())
    finally:
        store.close()
    assert stored == read == odd


def test_a_row_this_library_did_not_write_is_a_miss_named_in_a_warning(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresCallCache(store_url)
    with psycopg.connect(store_url) as connection:
        connection.execute(
            "INSERT INTO rlm_calls (key, text, model, input_tokens, output_tokens, cost) VALUES (%s, %s, %s, -5, 1, 0)",
            ("planted", b"FINAL('planted')", b"m"),
        )
        connection.execute(
            "INSERT INTO rlm_calls (key, text, model, input_tokens, output_tokens, cost) VALUES (%s, %s, %s, 1, 1, 0)",
            ("not utf-8", b"\xff\xfe", b"m"),
        )
    try:
        found = [asyncio.run(store.get(key)) for key in ("planted", "not utf-8")]
    finally:
        store.close()
    assert found == [None, None]
    warned = [r.getMessage() for r in caplog.records if "did not write" in r.getMessage()]
    assert len(warned) == 2 and shown_url(store_url) in warned[0] and PASSWORD not in caplog.text


def test_a_url_without_its_password_takes_it_from_pgpassword(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres.url().replace(f":{PASSWORD}@", "@")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    store, owned = open_cache(url)
    assert owned and isinstance(store, PostgresCallCache)
    store.close()


@pytest.mark.parametrize("command", ["serve", "mcp", "ask"])
def test_without_the_store_extra_a_postgresql_url_names_it_in_one_line(command: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a context")
    env = hiding_env(tmp_path, ["psycopg", "psycopg_pool"]) | {"OPENAI_API_KEY": "k"}
    url = "postgresql://rlm@127.0.0.1:1/db"
    argv = _command_line(command, url, tmp_path)
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count('pip install "rlm-adapters[store]"') == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_closing_the_rlm_ends_its_stores_threads_and_a_later_run_opens_them_again(
    store_url: str, fake_server: Any
) -> None:
    fake_server.root = ["FINAL('one')"]

    def pool_threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("rlm-store")]

    rlm = _on_the_store(fake_server.base_url, store_url)
    assert rlm.completion("a context", "q").response == "one"
    assert pool_threads()
    rlm.close()
    assert pool_threads() == []
    assert rlm.completion("a context", "q").usage_summary.total.cached_calls == 1  # the pool opened again
    rlm.close()
    assert pool_threads() == []


def test_replica_processes_opening_a_new_store_together_all_start_and_migrate_it_once(store_url: str) -> None:
    program = (
        "import sys\nfrom rlm_adapters.core.cache import PostgresCallCache\nPostgresCallCache(sys.argv[1]).close()\n"
    )
    started = [
        subprocess.Popen([sys.executable, "-c", program, store_url], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    errors = [process.communicate(timeout=120)[1] for process in started]
    assert [process.returncode for process in started] == [0] * 4, errors
    assert _versions(store_url) == [m.version for m in MIGRATIONS]


@pytest.fixture
def tiny_disk(postgres: PostgresServer) -> Any:
    """A 2 MiB tmpfs the test cluster can put a tablespace on (root only: it is mounted for the test)."""
    folder = Path(tempfile.mkdtemp(prefix="rlm-pg-tiny-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"a full disk needs a small tmpfs, and mount refused: {mounted.stderr.decode().strip()[:200]}")
    try:
        if postgres.owner is not None:
            os.chown(folder, postgres.owner.pw_uid, postgres.owner.pw_gid)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)
        folder.rmdir()


def test_a_full_disk_is_one_line_at_the_call_and_the_answer_is_kept(
    store_url: str, tiny_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's table on a 2 MiB disk, filled: the run's replies cannot be written, and it answers all the same."""
    PostgresCallCache(store_url).close()  # the schema, in the default tablespace
    with psycopg.connect(store_url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLESPACE tiny_{os.getpid()} LOCATION '{tiny_disk}'")
        connection.execute(f"ALTER TABLE rlm_calls SET TABLESPACE tiny_{os.getpid()}")
        for size in (64 << 10, 4 << 10, 256, 1):  # filler rows until not even a small one fits
            with pytest.raises(psycopg.errors.DiskFull):
                for index in range(100_000):
                    connection.execute(
                        "INSERT INTO rlm_calls (key, text, model, input_tokens, output_tokens, cost) "
                        "VALUES (%s, %s, 'filler', 0, 0, 0)",
                        (f"filler-{size}-{index}", os.urandom(size)),
                    )
    caplog.set_level(logging.WARNING)
    with LedgerServer(root=BATCHES, latency=0.01) as server:
        rlm = _on_the_store(server.base_url, store_url)
        result = rlm.completion("the first document", "Add up the magic numbers.")
        rlm.close()
    assert (result.finish_reason, result.response) == ("final", BATCHES_ANSWER)
    assert len(server.arrived) == CALLS
    warnings = [r.getMessage() for r in caplog.records if "call cache" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "out of disk space" in warnings[0] and shown_url(store_url) in warnings[0]
    assert PASSWORD not in caplog.text
    with pytest.raises(StoreError, match="out of disk space") as full:
        asyncio.run(PostgresCallCache(store_url).put("k", CachedReply("x" * (1 << 20), 1, 1, "m", 0.0)))
    assert PASSWORD not in str(full.value)
    with psycopg.connect(store_url, autocommit=True) as connection:  # so that the tablespace can go
        connection.execute("DROP TABLE rlm_calls")
        connection.execute(f"DROP TABLESPACE tiny_{os.getpid()}")
