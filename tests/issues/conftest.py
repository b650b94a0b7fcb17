"""Fixtures shared by the issue regressions."""

from tests.loop_lag import frozen_heap as frozen_heap  # the loop-stall probes' (issue 48)

try:  # without the serve extra (tests/test_missing_extras.py collects this folder) those tests skip themselves
    from tests.serve.conftest import serve as serve  # `rlm serve` in a thread, stopped at the test's end
    from tests.serve.conftest import upstream as upstream  # the fake OpenAI server it calls
except ImportError:
    pass
