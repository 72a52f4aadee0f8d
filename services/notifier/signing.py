"""Signing a webhook body: HMAC-SHA256 of the raw bytes under the shared secret.

The receiver recomputes the HMAC of the exact bytes it received and compares
it with ``X-Agui-Signature`` in constant time; nothing else is signed, so
the body must be verified before it is parsed. ``X-Agui-Delivery`` carries
the notification's delivery id (the same on every attempt) for the
receiver's idempotency. Pure.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["DELIVERY_HEADER", "SIGNATURE_HEADER", "headers", "sign", "verify"]

SIGNATURE_HEADER = "X-Agui-Signature"
DELIVERY_HEADER = "X-Agui-Delivery"
_PREFIX = "sha256="


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Agui-Signature`` value: ``sha256=`` and the hex HMAC-SHA256 of ``body``."""
    return _PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` (a header's value) signs ``body`` under ``secret``."""
    if signature is None or not signature.startswith(_PREFIX):
        return False
    return hmac.compare_digest(sign(secret, body), signature)


def headers(secret: bytes, body: bytes, delivery_id: str) -> dict[str, str]:
    """The headers of one delivery of ``body``."""
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(secret, body),
        DELIVERY_HEADER: delivery_id,
    }
