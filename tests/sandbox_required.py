"""``RLM_REQUIRE_SANDBOX=1``: a sandbox launcher or engine that a test needs and this machine lacks is a failure.

Without the switch such a test skips with the reason (a developer's machine may have no Docker engine, no
system bubblewrap). CI sets it (`.ci/run`), so that a CI run cannot pass without running the break-out suite
at every level; ``CI=true`` alone implies it for the break-out suite (tests/security).
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

SWITCH = "RLM_REQUIRE_SANDBOX"
MARK = "needs_sandbox"


def check_switch() -> None:
    """Refuse a value of the switch that means neither on nor off (``true`` would silently mean off)."""
    value = os.environ.get(SWITCH, "")
    if value not in ("", "0", "1"):
        raise pytest.UsageError(f"{SWITCH} must be 1 (require every sandbox level) or 0, got {value!r}")


def required(*, security: bool = False) -> bool:
    """Whether a missing launcher or engine fails: the switch, or ``CI=true`` for the break-out suite."""
    return os.environ.get(SWITCH) == "1" or (security and os.environ.get("CI") == "true")


def missing(what: str, *, security: bool = False) -> NoReturn:
    """Skip because `what` is missing here, or fail naming it when it is required.

    Args:
        what: What is missing and how to get it (``no working system bubblewrap (apt-get install bubblewrap)``).
        security: Whether the caller is the break-out suite, which ``CI=true`` requires too.
    """
    if required(security=security):
        why = f"{SWITCH}=1" if os.environ.get(SWITCH) == "1" else "CI=true"
        pytest.fail(f"{what}; {why} requires every sandbox level to run here", pytrace=False)
    pytest.skip(what)


def needs_sandbox(problem: str | None, *, security: bool = False) -> pytest.MarkDecorator:
    """Mark a test that needs a launcher or engine: `problem` (None when it is there) skips it, or fails it
    under the switch (`tests/conftest.py` reads the mark before the test runs)."""
    return getattr(pytest.mark, MARK)(problem, security=security)
