"""`rlm keys` against a real PostgreSQL store (issue 52): add, list, revoke, usage, and every bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from rlm_adapters.core.cache import KeyStore
from tests.postgres import PASSWORD


def _rlm(*args: str, store: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RLM_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    if store is not None:
        env["RLM_STORE"] = store
    return subprocess.run(
        [sys.executable, "-m", "rlm_adapters", "keys", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_add_prints_the_key_alone_once_and_the_store_keeps_only_its_hash(store_url: str, keys: KeyStore) -> None:
    added = _rlm("add", "alice", "--budget", "5/day", "--models", "rlm-mini,rlm-big", store=store_url)
    assert added.returncode == 0, added.stderr
    secret = added.stdout.strip()
    assert added.stdout == secret + "\n" and secret.startswith("rlmk_") and len(secret) >= 40
    assert added.stderr == ""
    with psycopg.connect(store_url) as connection:
        for table in ("rlm_keys", "rlm_key_spend", "rlm_key_holds"):
            dumped = connection.execute(f"SELECT * FROM {table}").fetchall()
            assert secret not in repr(dumped) and secret.encode() not in repr(dumped).encode()
        database = connection.execute("SELECT string_agg(t::text, ' ') FROM rlm_keys t").fetchone()
    assert database is not None and secret not in str(database[0])
    # The key found again by its secret, and no other.
    found = keys.lookup(secret)
    assert found is not None and (found.name, found.budget, found.period) == ("alice", 5.0, "day")
    assert found.models == ("rlm-mini", "rlm-big")
    assert keys.lookup(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    second = _rlm("add", "bob", "--store", store_url)
    assert second.returncode == 0 and second.stdout.strip() != secret


def test_list_revoke_and_usage_show_what_each_key_spent(store_url: str, keys: KeyStore) -> None:
    keys.add("alice", 2.0, "week", ["rlm-mini"])
    keys.add("bob")
    hold = keys.hold("alice", 0.5)
    keys.settle("alice", hold, "gpt-5-mini", 1200, 300, 0.25, False)
    keys.settle("alice", None, "gpt-5-nano", 100, 0, 0.01, True)
    listed = _rlm("list", store=store_url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "BUDGET", "SPENT", "THIS", "PERIOD", "MODELS", "CREATED", "REVOKED"]
    alice = next(line for line in lines if line.startswith("alice"))
    assert "$2.00/week" in alice and "$0.2600" in alice and "rlm-mini" in alice and alice.endswith("-")
    bob = next(line for line in lines if line.startswith("bob"))
    assert "no budget" in bob and " all " in bob
    revoked = _rlm("revoke", "bob", store=store_url)
    assert revoked.returncode == 0 and "revoked" in revoked.stderr and revoked.stdout == ""
    assert not _rlm("list", store=store_url).stdout.splitlines()[-1].endswith(" -"), "bob's revocation is listed"
    again = _rlm("revoke", "bob", store=store_url)
    assert again.returncode == 0 and "was revoked already" in again.stderr
    usage = _rlm("usage", "alice", store=store_url)
    assert usage.returncode == 0, usage.stderr
    rows = usage.stdout.splitlines()
    assert rows[0].split() == ["NAME", "DAY", "MODEL", "CALLS", "CUT", "INPUT", "TOKENS", "OUTPUT", "TOKENS", "DOLLARS"]
    mini = next(row for row in rows if "gpt-5-mini" in row).split()
    assert mini[3:] == ["1", "0", "1,200", "300", "$0.2500"]
    nano = next(row for row in rows if "gpt-5-nano" in row).split()
    assert nano[3:5] == ["1", "1"], "a cut call is counted as one"
    everyone = _rlm("usage", store=store_url)
    assert len(everyone.stdout.splitlines()) == 3
    with psycopg.connect(store_url) as connection:
        assert connection.execute("SELECT count(*) FROM rlm_key_holds").fetchone() == (0,)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("add", "bob", "--budget", "10"), "argument --budget: '10' needs a period: DOLLARS/day"),
        (("add", "bob", "--budget", "-1/day"), "argument --budget: '-1/day': the dollars '-1' must be above 0"),
        (("add", "bob", "--budget=0/week"), "argument --budget: '0/week': the dollars '0' must be above 0"),
        (("add", "bob", "--budget", "5/year"), "the period 'year' is none of day, week, month"),
        (("add", "bob", "--budget", "five/day"), "'five/day': the dollars 'five' is not a number"),
        (("add", "bob", "--models", "a,,b"), "argument --models: 'a,,b' holds an empty name"),
        (("add", "bad name"), "NAME: key name 'bad name' must be 1-64 letters"),
        (("add", "taken"), "NAME 'taken' is taken by a key of this store: choose another name"),
        (("revoke", "nobody"), "NAME 'nobody' is no key of this store: rlm keys list shows them"),
        (("usage", "nobody"), "NAME 'nobody' is no key of this store"),
        (("add", "bob", "--bugdet", "1/day"), "unknown flag --bugdet; did you mean --budget?"),
        (("remove", "bob"), "unknown command 'remove'; did you mean revoke?"),
    ],
)
def test_each_bad_input_is_one_line_and_exit_2(
    store_url: str, keys: KeyStore, args: tuple[str, ...], expected: str
) -> None:
    keys.add("taken")
    done = _rlm(*args, store=store_url)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert expected in done.stderr
    assert PASSWORD not in done.stderr


@pytest.mark.parametrize(
    ("args", "store", "expected"),
    [
        (
            ("list",),
            None,
            "rlm keys list: no store named: give --store postgresql://USER@HOST/DATABASE or set RLM_STORE",
        ),
        (("list", "--store", "sqlite:///calls.sqlite"), None, "--store 'sqlite:///calls.sqlite' is not a PostgreSQL"),
        (("list",), "calls.sqlite", "RLM_STORE 'calls.sqlite' is not a PostgreSQL store: keys and budgets live in"),
    ],
)
def test_a_missing_or_sqlite_store_is_refused_saying_keys_need_postgresql(
    args: tuple[str, ...], store: str | None, expected: str
) -> None:
    done = _rlm(*args, store=store)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip().endswith("give postgresql://USER@HOST/DATABASE") or "no store named" in done.stderr
    assert expected in done.stderr and len(done.stderr.splitlines()) == 1


def test_an_unreachable_store_or_a_wrong_password_is_one_line_without_the_password(store_url: str) -> None:
    wrong = store_url.replace(PASSWORD, "not-the-password")
    done = _rlm("list", store=wrong)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "refused the password of user 'rlm'" in done.stderr and "not-the-password" not in done.stderr


def test_without_the_store_extra_the_command_names_it_in_one_line() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from rlm_adapters.cli._main import main\n"
        "raise SystemExit(main(['keys', 'list', '--store', 'postgresql://rlm@127.0.0.1:1/db']))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert 'pip install "rlm-adapters[store]"' in done.stderr
