"""A call's money limit about to stop its run asks the client's user (MCP elicitation) whether to allow more.

    the run reached max_cost $1.00 after 40 of 60 sub-calls; allow $2.00?

The question is the engine's `on_budget` hook (`core.budget_hook`), sent as a form elicitation with one
number, the new ``max_cost``, offered at twice the limit. Accepting raises the limit and the run goes on from
where it was; declining, cancelling, or an answer that is not a number above the limit ends it as it would
have ended (the partial answer comes back). The server's own ``--max-cost`` is a ceiling no answer can pass:
an answer above it is cut to it, and a call already at it is not asked. Only ``max_cost`` is asked about: the
other limits (iterations, tokens, sub-calls) are the operator's, not the call's.

Nothing asks when no one can answer: a client that did not declare elicitation, a 2026-07-28 request (it has
no channel for a request mid-call), or a background run (the call that started it has returned).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from mcp.server.elicitation import AcceptedElicitation
from mcp.server.mcpserver import Context
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, create_model

from rlm_adapters.core import OnBudget
from rlm_adapters.core.adapter_kit import EventTally, limit_amount

logger = logging.getLogger("rlm_adapters.mcp_server")


def can_elicit(ctx: Context) -> bool:
    """Whether the client of `ctx`'s call can be asked mid-call (declared elicitation, handshake era)."""
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    return ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS


class BudgetElicitation:
    """An `on_budget` hook asking the MCP client whether the call's ``max_cost`` may grow.

    Args:
        ctx: The tool call's context (the question travels with its request).
        tally: The run's counts, for the question's "after 40 of 60 sub-calls".
        ceiling: The server's ``--max-cost`` (None: no ceiling).
    """

    def __init__(self, ctx: Context, tally: EventTally, ceiling: float | None) -> None:
        self.ctx = ctx
        self.tally = tally
        self.ceiling = ceiling
        self.asked = 0

    def question(self, limit: float, offer: float) -> str:
        """The question for the limit `limit`, offering `offer`."""
        tally = self.tally
        calls = ""
        if tally.sub_calls_started:
            calls = f" after {tally.sub_calls_finished} of {tally.sub_calls_started} sub-calls"
        reached, allow = limit_amount("max_cost", limit), limit_amount("max_cost", offer)
        return f"the run reached max_cost {reached}{calls}; allow {allow}?"

    async def __call__(self, name: str, used: float, limit: float) -> float | None:
        """Ask; the new limit, or None to let the run stop."""
        if name != "max_cost":
            return None
        offer = limit * 2 if self.ceiling is None else min(limit * 2, self.ceiling)
        if offer <= limit:
            return None  # at the server's ceiling already: nothing to offer
        form = _form(offer, self.ceiling)
        self.asked += 1
        answer = await self.ctx.elicit(self.question(limit, offer), form)
        if not isinstance(answer, AcceptedElicitation):
            return None
        value = getattr(answer.data, "max_cost", None)
        if not isinstance(value, int | float) or not math.isfinite(value) or value <= limit:
            logger.info("the client answered max_cost=%r, not a number above %g: the run stops", value, limit)
            return None
        return float(value) if self.ceiling is None else min(float(value), self.ceiling)


def _form(offer: float, ceiling: float | None) -> type[BaseModel]:
    """The one-field form: the new ``max_cost`` in USD, the offer as its default."""
    most = "" if ceiling is None else f", at most {limit_amount('max_cost', ceiling)} (the server's --max-cost)"
    field: Any = (float, Field(default=round(offer, 6), description=f"The new max_cost in USD{most}"))
    return create_model("RaiseMaxCost", max_cost=field)


def budget_hook(ctx: Context, tally: EventTally, ceiling: float | None, *, background: bool) -> OnBudget | None:
    """The call's `on_budget`: a `BudgetElicitation` when the client can answer, else None (nobody asks)."""
    if background or not can_elicit(ctx):
        return None
    return BudgetElicitation(ctx, tally, ceiling)


__all__ = ["BudgetElicitation", "budget_hook", "can_elicit"]
