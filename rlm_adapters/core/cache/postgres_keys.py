"""Keys and budgets in the shared PostgreSQL store: `KeyStore` (the keys, their spend, their holds) and
`KeyAccount` (one key paying for one run's calls, the engine's `Account`).

A key is ``rlmk_`` and 256 random bits (`secrets.token_urlsafe`); the store keeps only its SHA-256. A fast hash is
enough, unlike for passwords: nobody can guess through 2**256 secrets, whatever each guess costs, and a slow
hash (bcrypt, argon2) would cost every request tens of milliseconds. The secret is printed once by
``rlm keys add``; a lost one is revoked and replaced.

A budget is dollars per ``day``, ``week`` or ``month`` (UTC calendar periods: a week starts on Monday), or none.
Spend is one row per key, UTC day and model (tokens, calls, cut calls, dollars), added to as each call settles.
Before a call is sent its worst-case price is held (`hold`): in one transaction that locks the key's row,
what the period spent plus what calls in flight hold plus this price must fit in the budget. A call that would
fit once the calls in flight settle waits for them (asking again, 20 ms to 0.5 s apart); one that cannot fit
even then is refused. So replicas on one store cannot spend past a budget together: the most a key overspends
is what one call costs beyond its hold (a reply's real price above its estimate, or a provider's own figure). A hold
expires after `HOLD_SECONDS` (a replica that died mid-call leaves one behind, freed then).

`KeyStore.lookup` (a request's bearer token to its key) remembers a key it found for `lookup_seconds` (2 s by
default): a revoked key is refused within that bound. The memory is the `KeyStore` object's own
(`KeyStore.forget` empties it).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import psycopg

from rlm_adapters.core.account import AccountRefused
from rlm_adapters.core.cache.postgres_store import Connection, PostgresStore
from rlm_adapters.core.cache.store_url import KEY_PREFIX
from rlm_adapters.errors import StoreError

logger = logging.getLogger("rlm_adapters.cache")

Period = Literal["day", "week", "month"]
PERIODS: tuple[str, ...] = get_args(Period)
# A call's hold outlives any model request (600 s by default) with room to spare.
HOLD_SECONDS = 3600
# Seconds between a call's asks for a hold that fits once other calls settle: the first, the most.
HOLD_RETRY = (0.02, 0.5)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")

_PERIOD_START = "date_trunc(k.period, now() AT TIME ZONE 'UTC')"
_STANDING = f"""
SELECT k.name, k.budget, k.period, k.models, k.created_at, k.revoked_at,
       coalesce((SELECT sum(s.dollars) FROM rlm_key_spend s
                 WHERE s.key_name = k.name AND s.day >= coalesce({_PERIOD_START}, '-infinity')::date), 0),
       coalesce((SELECT sum(h.dollars) FROM rlm_key_holds h WHERE h.key_name = k.name AND h.expires_at > now()), 0),
       ({_PERIOD_START} + ('1 ' || k.period)::interval) AT TIME ZONE 'UTC'
FROM rlm_keys k
"""
_SPEND = """
INSERT INTO rlm_key_spend AS s (key_name, model, day, input_tokens, output_tokens, calls, cut_calls, dollars)
VALUES (%s, %s, (now() AT TIME ZONE 'UTC')::date, %s, %s, 1, %s, %s)
ON CONFLICT (key_name, day, model) DO UPDATE SET
    input_tokens = s.input_tokens + excluded.input_tokens,
    output_tokens = s.output_tokens + excluded.output_tokens,
    calls = s.calls + 1,
    cut_calls = s.cut_calls + excluded.cut_calls,
    dollars = s.dollars + excluded.dollars
"""


def secret_hash(secret: str) -> bytes:
    """What the store keeps of a key: the SHA-256 of its secret."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def looks_like_key(secret: str) -> bool:
    """Whether a bearer token is meant as a key (``rlmk_...``), not the server's own token."""
    return secret.startswith(KEY_PREFIX)


class KeyTaken(Exception):
    """A key of that name exists already (revoked or not: a name is never reused, so usage stays its own)."""


class UnknownKey(LookupError):
    """No key has that name."""


@dataclass(frozen=True)
class KeyStanding:
    """One key, as the store holds it now.

    Attributes:
        name: Its name.
        budget: Dollars per `period`, or None.
        period: ``day``, ``week``, ``month``, or None without a budget.
        models: The served models it may use, or None for all.
        created_at: When it was added.
        revoked_at: When it was revoked, or None.
        spent: Dollars spent in the current period (without a budget: ever).
        held: Dollars held by its calls in flight.
        resets_at: When the current period ends (UTC), or None without a budget.
    """

    name: str
    budget: float | None
    period: Period | None
    models: tuple[str, ...] | None
    created_at: datetime.datetime
    revoked_at: datetime.datetime | None
    spent: float
    held: float
    resets_at: datetime.datetime | None

    @property
    def over_budget(self) -> bool:
        """Whether the period's spend has reached the budget."""
        return self.budget is not None and self.spent >= self.budget

    def budget_words(self) -> str:
        """The budget as people read it: ``$5.00/day``, or ``no budget``."""
        return "no budget" if self.budget is None else f"${self.budget:,.2f}/{self.period}"

    def reset_words(self) -> str:
        """When the period resets, as ISO 8601 UTC (``2026-12-05T00:00:00Z``)."""
        if self.resets_at is None:
            return "never"
        return self.resets_at.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"

    def refusal(self) -> str:
        """Why the key may not spend now: its budget, what it spent, and when the period resets."""
        return (
            f"key {self.name!r} has spent ${self.spent:,.4f} of its budget of {self.budget_words()}; "
            f"the budget resets at {self.reset_words()}"
        )

    def allows(self, model: str) -> bool:
        """Whether the key may use the served model `model`."""
        return self.models is None or model in self.models


@dataclass(frozen=True)
class UsageRow:
    """What one key spent on one model on one UTC day."""

    name: str
    day: datetime.date
    model: str
    input_tokens: int
    output_tokens: int
    calls: int
    cut_calls: int
    dollars: float


def _standing(row: Sequence[object]) -> KeyStanding:
    name, budget, period, models, created, revoked, spent, held, resets = row
    return KeyStanding(
        str(name),
        None if budget is None else float(budget),  # type: ignore[arg-type]
        period,  # type: ignore[arg-type]
        None if models is None else tuple(models),  # type: ignore[arg-type]
        created,  # type: ignore[arg-type]
        revoked,  # type: ignore[arg-type]
        float(spent),  # type: ignore[arg-type]
        float(held),  # type: ignore[arg-type]
        resets,  # type: ignore[arg-type]
    )


class KeyStore:
    """The keys of a PostgreSQL store: add, list, revoke, look up, and hold and settle what their calls cost.

    Args:
        database: The store (its schema holds the keys' tables from version 2 on).
        lookup_seconds: How long a key found by `lookup` is remembered (the bound on a revocation's delay).
    """

    def __init__(self, database: PostgresStore, *, lookup_seconds: float = 2.0) -> None:
        self.database = database
        self.lookup_seconds = lookup_seconds
        self._found: dict[bytes, tuple[float, KeyStanding]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"KeyStore({self.database.shown!r})"

    # -- the CLI's ------------------------------------------------------------------------------------
    def add(
        self, name: str, budget: float | None = None, period: Period | None = None, models: Sequence[str] | None = None
    ) -> str:
        """Add a key; its secret, the only time it exists outside the holder's hands.

        Raises:
            KeyTaken: a key of that name exists (or existed).
            ValueError: a bad name, or a budget without a period (or the reverse).
        """
        if not NAME.match(name):
            raise ValueError(
                f"key name {name!r} must be 1-64 letters, digits or _.@- (starting with a letter or digit)"
            )
        if (budget is None) != (period is None):
            raise ValueError("a budget needs its period (DOLLARS/day, /week or /month), and a period a budget")
        secret = KEY_PREFIX + secrets.token_urlsafe(32)

        def insert(connection: Connection) -> None:
            connection.execute(
                "INSERT INTO rlm_keys (name, secret_hash, budget, period, models) VALUES (%s, %s, %s, %s, %s)",
                (name, secret_hash(secret), budget, period, None if models is None else list(models)),
            )

        try:
            self.database.run(insert)
        except StoreError as exc:
            if isinstance(exc.__context__, psycopg.errors.UniqueViolation):
                raise KeyTaken(name) from None
            raise
        return secret

    def revoke(self, name: str) -> bool:
        """Revoke the key `name`; False when it was revoked already.

        Raises:
            UnknownKey: no key has that name.
        """

        def update(connection: Connection) -> tuple[bool, bool]:
            done = connection.execute(
                "UPDATE rlm_keys SET revoked_at = now() WHERE name = %s AND revoked_at IS NULL RETURNING name", (name,)
            ).fetchone()
            exists = connection.execute("SELECT 1 FROM rlm_keys WHERE name = %s", (name,)).fetchone()
            return done is not None, exists is not None

        revoked, exists = self.database.run(update)
        if not exists:
            raise UnknownKey(name)
        self.forget()
        return revoked

    def standings(self, name: str | None = None) -> list[KeyStanding]:
        """Every key (or the one named), by name, with what it spent this period.

        Raises:
            UnknownKey: `name` is no key's.
        """

        def select(connection: Connection) -> list[KeyStanding]:
            if name is None:
                rows = connection.execute(_STANDING + " ORDER BY k.name").fetchall()
            else:
                rows = connection.execute(_STANDING + " WHERE k.name = %s", (name,)).fetchall()
            return [_standing(row) for row in rows]

        found = self.database.run(select)
        if name is not None and not found:
            raise UnknownKey(name)
        return found

    def usage(self, name: str | None = None) -> list[UsageRow]:
        """What each key (or the one named) spent, by key, UTC day and model.

        Raises:
            UnknownKey: `name` is no key's.
        """
        if name is not None:
            self.standings(name)

        def select(connection: Connection) -> list[UsageRow]:
            query = (
                "SELECT key_name, day, model, input_tokens, output_tokens, calls, cut_calls, dollars FROM rlm_key_spend"
            )
            if name is None:
                rows = connection.execute(query + " ORDER BY key_name, day, model").fetchall()
            else:
                rows = connection.execute(query + " WHERE key_name = %s ORDER BY day, model", (name,)).fetchall()
            return [UsageRow(*row) for row in rows]  # type: ignore[arg-type]

        return self.database.run(select)

    # -- the servers' ---------------------------------------------------------------------------------
    def lookup(self, secret: str) -> KeyStanding | None:
        """The key whose secret `secret` is, unrevoked; None for an unknown or revoked one.

        A key found is remembered `lookup_seconds` (its standing too: a request's 429 check may be that old).

        Raises:
            StoreError: the store failed.
        """
        digest = secret_hash(secret)
        now = time.monotonic()
        with self._lock:
            seen = self._found.get(digest)
            if seen is not None and now - seen[0] < self.lookup_seconds:
                return seen[1]

        def select(connection: Connection) -> KeyStanding | None:
            row = connection.execute(_STANDING + " WHERE k.secret_hash = %s AND k.revoked_at IS NULL", (digest,))
            found = row.fetchone()
            return None if found is None else _standing(found)

        standing = self.database.run(select)
        with self._lock:
            if standing is None:
                self._found.pop(digest, None)
            else:
                if len(self._found) > 10_000:  # tokens that come and go: bounded memory
                    self._found.clear()
                self._found[digest] = (now, standing)
        return standing

    def forget(self) -> None:
        """Forget the keys `lookup` remembers (the next request of each asks the store)."""
        with self._lock:
            self._found.clear()

    def hold(self, name: str, dollars: float) -> int:
        """Hold `dollars` for one call of key `name`, if its budget allows; the hold's id.

        Raises:
            AccountRefused: the key's period spend plus its holds plus `dollars` would cross its budget, or the
                key was revoked.
            StoreError: the store failed.
        """

        def take(connection: Connection) -> int | KeyStanding:
            with connection.transaction():
                connection.execute("SELECT 1 FROM rlm_keys WHERE name = %s FOR UPDATE", (name,))
                row = connection.execute(_STANDING + " WHERE k.name = %s", (name,)).fetchone()
                if row is None:
                    raise UnknownKey(name)
                standing = _standing(row)
                if standing.revoked_at is not None:
                    return standing
                if standing.budget is not None and standing.spent + standing.held + dollars > standing.budget:
                    return standing
                held = connection.execute(
                    "INSERT INTO rlm_key_holds (key_name, dollars, expires_at) "
                    "VALUES (%s, %s, now() + %s * interval '1 second') RETURNING id",
                    (name, dollars, HOLD_SECONDS),
                ).fetchone()
                return int(held[0])  # type: ignore[index, arg-type]

        outcome = self.database.run(take)
        if isinstance(outcome, int):
            return outcome
        if outcome.revoked_at is not None:
            raise AccountRefused(f"key {name!r} was revoked", outcome.spent, outcome.budget or 0.0)
        raise AccountRefused(
            f"{outcome.refusal()} (${outcome.held:,.4f} is held by calls in flight, and the next call may cost "
            f"${dollars:,.4f})",
            outcome.spent,
            outcome.budget or 0.0,
            outcome.held,
        )

    def settle(
        self, name: str, hold: int | None, model: str, input_tokens: int, output_tokens: int, dollars: float, cut: bool
    ) -> None:
        """Add one call's use to key `name`'s spend for today and `model`, and drop its hold, in one transaction.

        Raises:
            StoreError: the store failed.
        """

        def write(connection: Connection) -> None:
            with connection.transaction():
                connection.execute(_SPEND, (name, model, input_tokens, output_tokens, int(cut), dollars))
                if hold is not None:
                    connection.execute("DELETE FROM rlm_key_holds WHERE id = %s", (hold,))

        self.database.run(write)

    def release(self, hold: int) -> None:
        """Drop a hold whose call was never paid for.

        Raises:
            StoreError: the store failed.
        """
        self.database.execute("DELETE FROM rlm_key_holds WHERE id = %s", (hold,))


class KeyAccount:
    """One key paying for one run's model calls (the engine's `Account`): a hold per call, the spend per call.

    Args:
        keys: The store's keys.
        key: The key (as `KeyStore.lookup` found it).
    """

    def __init__(self, keys: KeyStore, key: KeyStanding) -> None:
        self.keys = keys
        self.key = key
        self.calls = 0  # calls settled (paid for, cut ones included)
        self.refused: str | None = None  # why the key refused a call, once it did
        self._writes: set[asyncio.Future[None]] = set()

    @property
    def refused_before_paying(self) -> str | None:
        """Why the key refused the run's first call, when it paid for none (its budget left less than one call):
        the run produced nothing its caller paid for, and the servers answer it as a spent budget."""
        return self.refused if self.calls == 0 else None

    @property
    def capped(self) -> bool:
        """Whether the key has a budget."""
        return self.key.budget is not None

    @property
    def name(self) -> str:
        """``key 'NAME'``."""
        return f"key {self.key.name!r}"

    async def hold(self, model: str, dollars: float) -> object:
        """Hold the call's worst-case price against the key's budget (a key without one holds nothing).

        Raises:
            AccountRefused: the budget would be crossed, or the store cannot say (a budget unchecked is not kept).
        """
        if not self.capped:
            return None
        wait = HOLD_RETRY[0]
        while True:
            try:
                return await asyncio.to_thread(self.keys.hold, self.key.name, dollars)
            except StoreError as exc:
                self.refused = f"{self.name}'s budget cannot be checked: {exc}"
                raise AccountRefused(self.refused, self.key.spent, self.key.budget or 0.0) from None
            except AccountRefused as exc:
                if not (exc.held > 0 and exc.spent + dollars <= exc.budget):
                    self.refused = str(exc)
                    raise
            # It fits once calls in flight (here or on another replica) settle: ask again shortly (the run's
            # deadline and its cancellation end the wait).
            await asyncio.sleep(wait)
            wait = min(wait * 2, HOLD_RETRY[1])

    def settle(
        self, hold: object, model: str, input_tokens: int, output_tokens: int, dollars: float, *, cut: bool
    ) -> None:
        """Queue the call's spend (and its hold's end) for the store; `flush` waits for it."""
        held = hold if isinstance(hold, int) else None
        self.calls += 1
        self._queue(self.keys.settle, self.key.name, held, model, input_tokens, output_tokens, dollars, cut)

    def release(self, hold: object) -> None:
        """Queue the end of a hold whose call was never paid for."""
        if isinstance(hold, int):
            self._queue(self.keys.release, hold)

    def _queue(self, job: Callable[..., None], *args: object) -> None:
        write: asyncio.Future[None] = asyncio.ensure_future(asyncio.to_thread(job, *args))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def flush(self) -> None:
        """Wait for every queued write; one the store failed is logged (the run's answer is kept)."""
        while self._writes:
            for outcome in await asyncio.gather(*list(self._writes), return_exceptions=True):
                if isinstance(outcome, BaseException):
                    logger.warning("%s: a call's spend was not recorded: %s", self.name, outcome)


__all__ = [
    "HOLD_SECONDS",
    "KEY_PREFIX",
    "PERIODS",
    "KeyAccount",
    "KeyStanding",
    "KeyStore",
    "KeyTaken",
    "Period",
    "UnknownKey",
    "UsageRow",
    "looks_like_key",
    "secret_hash",
]
