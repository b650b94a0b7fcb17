"""Token estimation: its own module, shared by the budget and the model clients."""

from rlm_adapters.core import tokens
from rlm_adapters.core.engine import budget
from rlm_adapters.core.tokens import estimate_tokens


def test_estimate_is_about_four_characters_a_token_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("x" * 4000) == 1000


def test_budget_still_exports_the_same_function() -> None:
    assert budget.estimate_tokens is tokens.estimate_tokens
