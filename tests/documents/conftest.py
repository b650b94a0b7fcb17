"""Fixtures of the document tests: a clean conversion cache per test, and the converter's libraries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlm_adapters.documents import CONVERSIONS


@pytest.fixture(autouse=True)
def _fresh_conversions() -> Iterator[None]:
    """Each test starts with nothing converted (the cache is process-wide)."""
    CONVERSIONS.clear()
    yield
    CONVERSIONS.clear()
