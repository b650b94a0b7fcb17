"""Cleanup that survives cancellation.

Frameworks cancel differently: asyncio cancels a task once, but anyio cancel scopes (used by the MCP SDK,
Starlette and others) cancel *every* later await in the scope. A plain ``await sandbox.aclose()`` in a
``finally`` block would then be cancelled too and leave a worker process running. `close_shielded` runs
the cleanup as its own task, shielded from the caller's cancellation, so it always completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

# Strong references: a shielded task outliving its cancelled caller must not be garbage-collected.
_pending: set[asyncio.Future[object]] = set()


async def close_shielded(cleanup: Awaitable[object]) -> None:
    """Await `cleanup` to the end even if the caller is cancelled meanwhile.

    If the caller is cancelled, `CancelledError` is re-raised at once while the cleanup task goes on to
    completion on the event loop.
    """
    task: asyncio.Future[object] = asyncio.ensure_future(cleanup)
    _pending.add(task)
    task.add_done_callback(_pending.discard)
    await asyncio.shield(task)
