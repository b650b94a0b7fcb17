"""The shared store's schema in PostgreSQL: its versions, the steps between them, and who applies them.

The store is at the version of the highest row of ``rlm_schema_version``. A server (or the first `RLM` naming
the store) brings it up to `LATEST` at start, one step of `MIGRATIONS` at a time, each in its own transaction
with its version row, while it holds a session advisory lock: replicas starting at once queue on the lock, and
each finds the steps the first applied already done. A store at a version newer than `LATEST` was written by a
newer rlm-adapters and is refused (its tables may mean what this code does not know).

The tables are prefixed ``rlm_`` because the database may be shared with other programs (``schema_version``
alone is a name other migration tools use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

# pg_advisory_lock's key for schema changes: "RLMS" (the SQLite cache's application id is "RLMC").
SCHEMA_LOCK = 0x524C4D53


@dataclass(frozen=True)
class Migration:
    """One step of the schema: what it adds and the statements that add it.

    Attributes:
        version: The version the store is at once this step is applied.
        description: What the step adds, as stored beside its version.
        statements: The SQL run, in order, in one transaction.
    """

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the call cache: one row per model reply, by request key; the first reply stored under a key wins "
        "(text and model as UTF-8 bytes, surrogates passed: PostgreSQL's TEXT holds no NUL)",
        (
            """
            CREATE TABLE rlm_calls (
                key TEXT PRIMARY KEY,
                text BYTEA NOT NULL,
                model BYTEA NOT NULL,
                input_tokens BIGINT NOT NULL,
                output_tokens BIGINT NOT NULL,
                cost DOUBLE PRECISION NOT NULL,
                stored_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """,
        ),
    ),
    Migration(
        2,
        "keys and budgets: each key's name, the SHA-256 of its secret (never the secret), its budget and period, "
        "its models; what each key spent per model and UTC day; the holds of its calls in flight",
        (
            """
            CREATE TABLE rlm_keys (
                name TEXT PRIMARY KEY,
                secret_hash BYTEA NOT NULL UNIQUE,
                budget DOUBLE PRECISION,
                period TEXT CHECK (period IN ('day', 'week', 'month')),
                models TEXT[],
                created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                revoked_at TIMESTAMPTZ,
                CHECK ((budget IS NULL) = (period IS NULL))
            )
            """,
            """
            CREATE TABLE rlm_key_spend (
                key_name TEXT NOT NULL REFERENCES rlm_keys (name),
                model TEXT NOT NULL,
                day DATE NOT NULL,
                input_tokens BIGINT NOT NULL DEFAULT 0,
                output_tokens BIGINT NOT NULL DEFAULT 0,
                calls BIGINT NOT NULL DEFAULT 0,
                cut_calls BIGINT NOT NULL DEFAULT 0,
                dollars DOUBLE PRECISION NOT NULL DEFAULT 0,
                PRIMARY KEY (key_name, day, model)
            )
            """,
            """
            CREATE TABLE rlm_key_holds (
                id BIGSERIAL PRIMARY KEY,
                key_name TEXT NOT NULL REFERENCES rlm_keys (name),
                dollars DOUBLE PRECISION NOT NULL,
                expires_at TIMESTAMPTZ NOT NULL
            )
            """,
            "CREATE INDEX rlm_key_holds_by_key ON rlm_key_holds (key_name, expires_at)",
        ),
    ),
    Migration(
        3,
        "background runs and MCP tasks (their results, the replica running each and its lease), and the records "
        "of session= REPLs naming the replica that holds each; JSON is stored ASCII-escaped (json, not jsonb: "
        "a result may hold NUL)",
        (
            """
            CREATE TABLE rlm_runs (
                id TEXT PRIMARY KEY,
                principal TEXT NOT NULL,
                arguments JSON NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('working', 'done', 'failed', 'cancelled')),
                result JSON,
                error TEXT,
                replica TEXT NOT NULL,
                lease_expires TIMESTAMPTZ NOT NULL,
                task_created_at TIMESTAMPTZ,
                task_ttl_ms BIGINT,
                started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                finished_at TIMESTAMPTZ
            )
            """,
            "CREATE INDEX rlm_runs_by_principal ON rlm_runs (principal, started_at)",
            "CREATE INDEX rlm_runs_by_replica ON rlm_runs (replica) WHERE state = 'working'",
            """
            CREATE TABLE rlm_sessions (
                principal TEXT NOT NULL,
                name TEXT NOT NULL,
                replica TEXT NOT NULL,
                lease_expires TIMESTAMPTZ NOT NULL,
                options JSON NOT NULL,
                turns JSON NOT NULL,
                updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                PRIMARY KEY (principal, name)
            )
            """,
        ),
    ),
)
LATEST = MIGRATIONS[-1].version

_VERSIONS = """
CREATE TABLE IF NOT EXISTS rlm_schema_version (
    version INTEGER PRIMARY KEY,
    description TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)
"""


class NewerSchemaError(Exception):
    """The store is at a version this code does not know.

    Attributes:
        version: The store's version.
    """

    def __init__(self, version: int) -> None:
        super().__init__(f"schema version {version} is newer than this code's {LATEST}")
        self.version = version


def migrate(connection: psycopg.Connection[tuple[object, ...]]) -> list[int]:
    """Bring the store up to `LATEST` under the schema lock; the versions this call applied (often none).

    Args:
        connection: An autocommit connection (each step commits on its own).

    Raises:
        NewerSchemaError: The store is at a newer version than `LATEST`; nothing was changed.
        psycopg.Error: A step failed (it was rolled back; the steps before it stay applied).
    """
    applied: list[int] = []
    connection.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
    try:
        connection.execute(_VERSIONS)
        row = connection.execute("SELECT coalesce(max(version), 0) FROM rlm_schema_version").fetchone()
        current = int(row[0]) if row is not None else 0  # type: ignore[call-overload]
        if current > LATEST:
            raise NewerSchemaError(current)
        for step in MIGRATIONS[current:]:
            with connection.transaction():
                for statement in step.statements:
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO rlm_schema_version (version, description) VALUES (%s, %s)",
                    (step.version, step.description),
                )
            applied.append(step.version)
    finally:
        connection.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))
    return applied
