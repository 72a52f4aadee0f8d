"""Signatures: HMAC-SHA256 of the raw body, verified in constant time."""

from __future__ import annotations

import pytest

from services.notifier.delivery import backoff_s
from services.notifier.signing import headers, sign, verify

pytestmark = pytest.mark.unit

BODY = b"The quick brown fox jumps over the lazy dog"
KNOWN = "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"


def test_the_published_hmac_sha256_vector() -> None:
    assert sign(b"key", BODY) == KNOWN


def test_verify_accepts_only_the_exact_body_under_the_same_secret() -> None:
    assert verify(b"key", BODY, KNOWN)
    assert not verify(b"key", BODY + b" ", KNOWN)
    assert not verify(b"other", BODY, KNOWN)
    assert not verify(b"key", BODY, KNOWN.removeprefix("sha256="))
    assert not verify(b"key", BODY, KNOWN.replace("sha256=", "sha1="))
    assert not verify(b"key", BODY, None)
    assert not verify(b"key", BODY, KNOWN[:-1] + "0")


def test_headers_of_a_delivery() -> None:
    assert headers(b"key", BODY, "d-1") == {
        "Content-Type": "application/json", "X-Agui-Signature": KNOWN, "X-Agui-Delivery": "d-1"}


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_s(n, 0.5, 3.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff_s(1, 0.0, 3.0) == 0.0
