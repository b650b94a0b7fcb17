"""A real PostgreSQL server for tests: Debian's ``postgresql`` binaries, a fresh cluster in a temporary folder.

`PostgresServer` runs ``initdb`` (password authentication over TCP only) and ``postgres`` on a free port on
127.0.0.1, and stops it (``pg_ctl stop -m immediate`` for a store that goes away mid-run). PostgreSQL refuses
to run as root: under root the cluster belongs to the ``postgres`` user the package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

PASSWORD = "s3cret-Pg-pass"  # what no message or log may show
USER = "rlm"


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres`` (the newest installed), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb and shutil.which("postgres") else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster: `start`, `url`, `create_database`, `stop`, `remove`."""

    def __init__(self) -> None:
        folder = binaries()
        if folder is None:
            pytest.skip("PostgreSQL's server binaries are missing: install the Debian package postgresql")
        self.bin = folder
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="rlm-pg-"))
        self.data = self.folder / "data"
        self.owner = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
        self._initdb()

    def _as_owner(self, command: list[str]) -> list[str]:
        if self.owner is None:
            return command
        return ["setpriv", f"--reuid={self.owner.pw_uid}", f"--regid={self.owner.pw_gid}", "--clear-groups", *command]

    def _initdb(self) -> None:
        secret = self.folder / "pw"
        secret.write_text(PASSWORD)
        if self.owner is not None:
            os.chown(self.folder, self.owner.pw_uid, self.owner.pw_gid)
            os.chown(secret, self.owner.pw_uid, self.owner.pw_gid)
        command = [str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, f"--pwfile={secret}"]
        command += ["--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync"]
        subprocess.run(self._as_owner(command), check=True, capture_output=True, timeout=120)
        secret.unlink()

    def start(self, *, durable: bool = False) -> None:
        """Start the server and wait until it takes connections (`durable`: with fsync, as a real one runs)."""
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync={'on' if durable else 'off'}"
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-w", "-t", "60"]
        command += ["-l", str(self.folder / "log"), "start"]
        subprocess.run(self._as_owner(command), check=True, capture_output=True, timeout=90)

    def stop(self) -> None:
        """Stop the server at once (its clients' connections break)."""
        command = [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
        subprocess.run(self._as_owner(command), check=False, capture_output=True, timeout=90)

    def remove(self) -> None:
        """Stop the server and delete its cluster."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres", *, password: str = PASSWORD, port: int | None = None) -> str:
        """A URL of `database` with the password in it."""
        return f"postgresql://{USER}:{password}@127.0.0.1:{port or self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create `name` (empty) and return its URL."""
        command = [str(self.bin / "psql"), "-h", str(self.folder), "-p", str(self.port), "-U", USER, "-d", "postgres"]
        command += ["-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"']
        subprocess.run(self._as_owner(command), check=True, capture_output=True, timeout=60)
        return self.url(name)
