"""One `rlm-mcp` process among the replicas on a shared store: its id, and the thread that renews its leases.

A run working on a replica, and a ``session=`` REPL open on it, hold a lease in the store (`runs.shared_store`,
`sessions.shared_store`). The replica renews every lease it holds every `Lease.renew_every` seconds, in one
thread of its own (never the event loop: a loop busy with a large answer must not let a lease lapse); a lease
that was not renewed for `Lease.expires_after` seconds says "its replica is gone" (killed, its host down, or cut
off from the store), and another replica may take the run or the session over. The times are the database's
(``now()``), so replicas' clocks need not agree.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rlm_adapters.errors import ConfigurationError

logger = logging.getLogger("rlm_adapters.mcp_server")

LEASE_VARIABLE = "RLM_LEASE_SECONDS"


@dataclass(frozen=True)
class Lease:
    """How long a replica's hold on a run or session lasts unless renewed, and how often it is renewed.

    Attributes:
        expires_after: Seconds after its last renewal that a lease has lapsed; renewals come every third of it
            (`renew_every`), so two may fail in a row before it lapses.
    """

    expires_after: float = 15.0

    @property
    def renew_every(self) -> float:
        """Seconds between renewals: a third of `expires_after`."""
        return self.expires_after / 3

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> Lease:
        """The lease ``RLM_LEASE_SECONDS`` asks for (default 15 s).

        Raises:
            ConfigurationError: the value is not a number of seconds from 0.3 to 3600.
        """
        given = environ.get(LEASE_VARIABLE)
        if not given:
            return cls()
        try:
            seconds = float(given)
        except ValueError:
            seconds = math.nan
        if not 0.3 <= seconds <= 3600:
            raise ConfigurationError(
                f"{LEASE_VARIABLE}={given[:32]!r} must be a number of seconds from 0.3 to 3600 "
                "(how long a run's replica may be silent before another replica takes it over)"
            )
        return cls(seconds)


def new_replica_id() -> str:
    """``host:pid:random``: which process holds a run or session (the random part: a pid is reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Replica:
    """This process as one replica: its id, its lease times, and the thread renewing its leases.

    Args:
        lease: The lease times.
        replica_id: Its id (default: a new `new_replica_id`).
    """

    def __init__(self, lease: Lease | None = None, replica_id: str | None = None) -> None:
        self.lease = lease or Lease()
        self.id = replica_id or new_replica_id()
        self._ticks: list[Callable[[], None]] = []
        self._releases: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def every_renewal(self, tick: Callable[[], None], release: Callable[[], None] | None = None) -> None:
        """Call `tick` (in the renewing thread) at each renewal, and `release` when the replica stops; the thread
        starts at the first one registered."""
        with self._lock:
            self._ticks.append(tick)
            if release is not None:
                self._releases.append(release)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._renew, name="rlm-mcp-leases", daemon=True)
                self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease.renew_every):
            with self._lock:
                ticks = list(self._ticks)
            for tick in ticks:
                try:
                    tick()
                except Exception:  # one store's trouble must not stop the other's leases
                    logger.warning("renewing the leases of replica %s failed", self.id, exc_info=True)

    def close(self) -> None:
        """Stop renewing, and give up the leases this replica holds (a server stopping: other replicas take its
        unfinished runs and its sessions over at once, not after a lease; if the store is down, after it)."""
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
            releases, self._releases = self._releases, []
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.lease.renew_every + 5)
        for release in releases:
            try:
                release()
            except Exception:  # the leases then lapse on their own
                logger.warning("replica %s could not give up its leases", self.id, exc_info=True)


__all__ = ["LEASE_VARIABLE", "Lease", "Replica", "new_replica_id"]
