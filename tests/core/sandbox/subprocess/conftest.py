"""Fixtures of the subprocess launcher's tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rlm_adapters.core.sandbox.subprocess import isolation
from rlm_adapters.core.sandbox.subprocess.isolation import Reach


@pytest.fixture
def only(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Pretend this machine reaches exactly the given launchers."""

    def set_reaches(*found: Reach) -> None:
        monkeypatch.setattr(
            isolation, "launchers", lambda level, python, first_only=False: tuple(r for r in found if r.level == level)
        )

    return set_reaches
