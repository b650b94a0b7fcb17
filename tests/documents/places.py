"""Whether the sources cite a document's own places (``report.pdf:p7``): `Source.place`, from issue 26.

The documents give their places in ``metadata["places"]`` either way; the tests that check a citation by page
run once the sources package reads them, and say so while it does not.
"""

from __future__ import annotations

import dataclasses

import pytest

from rlm_adapters.core.result import Source

CITES_PLACES = "place" in {field.name for field in dataclasses.fields(Source)}
needs_places = pytest.mark.skipif(
    not CITES_PLACES, reason="needs Source.place, which cites pages, slides and cells (issue 26, branch sources)"
)
