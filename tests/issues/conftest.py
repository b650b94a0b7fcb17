"""Fixtures shared by the issue regressions."""

from tests.loop_lag import frozen_heap as frozen_heap  # the loop-stall probes' (issue 48)
