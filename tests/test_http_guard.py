"""`rlm_adapters.http_guard`: the loopback, Host, Origin and bearer checks of `rlm serve` and `rlm-mcp --http`."""

from __future__ import annotations

import pytest

from rlm_adapters.http_guard import bearer_matches, host_allowed, is_loopback, origin_allowed


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True), ("localhost", True), ("LOCALHOST:1", True), ("[::1]:80", True), ("[::1]", True),
        ("127.0.0.1.evil.example", False), ("localhost.evil.example:80", False), ("evil.example", False),
        ("127.0.0.1:80:80", False), ("127.0.0.1:http", False), ("[::1]evil", False), ("[::1", False),
        ("localhost@evil.example", False), ("", False), (None, False), ("10.0.0.1:8000", False),
    ],
)  # fmt: skip
def test_only_loopback_hosts_pass(host: str | None, allowed: bool) -> None:
    assert host_allowed(host) is allowed


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True), ("http://localhost:3000", True), ("https://127.0.0.1", True), ("http://[::1]:8080", True),
        ("https://evil.example", False), ("null", False), ("http://localhost.evil.example", False),
        ("file://", False), ("http://localhost:3000/path", False), ("", False),
    ],
)  # fmt: skip
def test_only_loopback_pages_pass(origin: str | None, allowed: bool) -> None:
    assert origin_allowed(origin) is allowed


def test_loopback_addresses_and_the_bearer_token() -> None:
    assert is_loopback("127.0.0.5") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    assert bearer_matches(b"Bearer s3cret", "s3cret")
    assert not bearer_matches(b"Bearer s3cre", "s3cret") and not bearer_matches(None, "s3cret")
    assert not bearer_matches(b"bearer s3cret", "s3cret")
