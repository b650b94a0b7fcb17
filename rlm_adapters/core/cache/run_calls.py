"""`RunCalls`: the call cache as one run sees it (its store, and how often each request was sent so far).

`core/engine/model_call.py:call_model` takes a `Ticket` for every model call before its first wait, looks it up, and on
a miss stores the reply the moment it returns. A store that fails (a full disk, a file another program
damaged) never fails the run: the call goes live or its reply is used unstored, and the run's first such
failure is logged once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from rlm_adapters.core.cache.base import CachedReply, CallCache
from rlm_adapters.core.cache.keys import call_key, identity_digest, request_digest
from rlm_adapters.core.lm import LMResponse, Message, ModelClient, client_identity

logger = logging.getLogger("rlm_adapters.cache")  # as `sqlite_file` logs, without loading sqlite3


class RunCalls:
    """The requests one run (its whole tree) sent, numbered per request, over one store.

    Args:
        store: Where replies are kept.
    """

    def __init__(self, store: CallCache) -> None:
        self.store = store
        self._sent: dict[str, int] = {}
        self._identities: dict[int, tuple[ModelClient, str]] = {}
        self._failed = False

    def ticket(self, client: ModelClient, messages: Sequence[Message]) -> Ticket:
        """The key of this call: its request and the number of times the run sent that request before."""
        request = request_digest(self._identity(client), messages)
        occurrence = self._sent.get(request, 0)
        self._sent[request] = occurrence + 1
        return Ticket(self, call_key(request, occurrence))

    def _identity(self, client: ModelClient) -> str:
        # Clients live as long as the run; the pair keeps the object, so its id cannot be reused meanwhile.
        known = self._identities.get(id(client))
        if known is None or known[0] is not client:
            known = (client, identity_digest(client_identity(client)))
            self._identities[id(client)] = known
        return known[1]

    def trouble(self, doing: str, error: BaseException) -> None:
        """Log the first failure of the store in this run (the run goes on without it)."""
        if not self._failed:
            self._failed = True
            logger.warning("the call cache failed while %s; the run goes on without it: %s", doing, error)


@dataclass(frozen=True)
class Ticket:
    """One model call's place in the cache."""

    calls: RunCalls
    key: str

    async def lookup(self) -> CachedReply | None:
        """The stored reply of this call, or None (also when the store fails)."""
        try:
            return await self.calls.store.get(self.key)
        except Exception as exc:  # a broken store costs a live call, never the run
            self.calls.trouble("reading a reply", exc)
            return None

    async def keep(self, response: LMResponse, cost: float) -> LMResponse:
        """Store a reply just paid for, before the run uses it; returns the reply to use.

        That is `response`, unless another process stored a reply under this key first: then the stored
        one, so that the run continues exactly as a resumed run will.
        """
        try:
            stored = await self.calls.store.put(self.key, CachedReply.of(response, cost))
        except Exception as exc:  # the reply was paid for: it is used even when it cannot be kept
            self.calls.trouble("storing a reply", exc)
            return response
        if stored.text == response.text:
            return response
        return dataclasses.replace(response, text=stored.text)
