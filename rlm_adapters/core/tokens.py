"""Token estimation for when a provider does not report its counts.

Its own module so that model clients and the budget both use it without the clients depending on the budget.
"""

from __future__ import annotations

import math


def estimate_tokens(text: str) -> int:
    """A cheap, conservative token estimate (about four characters a token)."""
    return tokens_for_chars(len(text))


def tokens_for_chars(chars: int) -> int:
    """`estimate_tokens` of a text of `chars` characters, without the text."""
    return math.ceil(chars / 4)
