"""Fixtures of the LlamaIndex adapter's tests."""

from __future__ import annotations

import pytest

from .corpus import Corpus, make_corpus


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """The 200-file folder (generated once per session)."""
    return make_corpus(tmp_path_factory.mktemp("corpus"))
