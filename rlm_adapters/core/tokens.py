"""Token estimation for when a provider does not report its counts.

Its own module so that model clients and the budget both use it without the clients depending on the budget.
"""

from __future__ import annotations

import math


def estimate_tokens(text: str) -> int:
    """A cheap, conservative token estimate (about four characters a token)."""
    return math.ceil(len(text) / 4)
