"""The HTTP server under `rlm serve`: uvicorn's h11 protocol with a deadline on each request's headers.

uvicorn bounds the idle time between two requests of a connection (``timeout_keep_alive``), not the time a
client takes to send a request's headers: a client that sends one header byte now and then (slowloris)
holds its connection, and a file descriptor, for ever, and never reaches the guard (Host, Origin, token)
that would refuse it. `DeadlineH11Protocol` closes a connection whose next request's headers have not all
arrived within ``request_timeout`` seconds of its opening or of its previous response; the app bounds the
body the same way (`rlm_adapters.serve.app`). h11 is the protocol uvicorn uses without ``httptools``; here
it is always the one, so that the deadline holds whatever else is installed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are late (`request_timeout`)."""

    request_timeout: float = 60.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def _arm(self) -> None:
        # The request under way now; a new one replaces it once its headers are in (h11's Request event).
        self.loop.call_later(self.request_timeout, self._expire, self.cycle)

    def _expire(self, cycle: Any) -> None:
        if self.cycle is cycle and not self.transport.is_closing():
            self.transport.close()


def protocol(request_timeout: float) -> type[DeadlineH11Protocol]:
    """The protocol class for uvicorn's ``http=`` option, with this deadline on each request's headers."""
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"request_timeout": request_timeout})


__all__ = ["DeadlineH11Protocol", "protocol"]
