"""The serve memory benchmark (issue 48, item 4) at a small size: waiting requests hold about their bytes, and
a body of millions of values is refused without being parsed."""

from __future__ import annotations

import pytest

from benchmarks.serve_memory_bench import measure


@pytest.mark.slow
def test_waiting_requests_hold_about_their_bytes_and_a_body_of_millions_of_values_is_not_parsed() -> None:
    waiting = measure("waiting", "messages", 16, waiting=2)
    assert waiting.outcome == "2 of 2 waiting"
    # Parsed, 16 MiB of 170-character messages is about 75 MiB: two of them held would be 150 MiB more. Their
    # bytes are 32 MiB; the allocator keeps some of what the checks used (87 MiB measured in a loaded full pass).
    assert waiting.after - waiting.before < 3.5 * 2 * 16, waiting
    refused = measure("refused", "many", 16)
    assert refused.outcome == "HTTP/1.1 400 Bad Request"
    assert refused.peak - refused.before < 4 * 16, refused  # parsed, it was 12 times its bytes
