"""Fixtures shared by the issue regressions (those of `rlm serve` are imported by the modules that use them:
this folder is collected without the serve extra too)."""

from tests.loop_lag import frozen_heap as frozen_heap  # the loop-stall probes' (issue 48)
