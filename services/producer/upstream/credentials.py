"""The credentials an upstream request carries, and an error page with them taken out — pure.

An error page may echo the request it refuses (some proxies quote its line and
headers), and its quote reaches every client of the run and the worker's log.
A request carries secrets in three places, each redacted from the quote:

* the configured header values (``AGUI_UPSTREAM_<NAME>_HEADERS``), and each
  word of one (the token of ``Bearer <token>``);
* the URL's query: the whole of it and each value (``?code=...``), as sent
  and percent-decoded;
* the URL's userinfo (``user:password@``): as written, its password, and the
  ``Authorization: Basic`` token httpx derives from it.

A piece shorter than ``MIN_CHARS`` is left alone: replacing every ``1`` or
``en`` of a page would garble the quote, and so short a piece protects nothing.

Only the head of a page is read (``redacted_head``): a secret its cut runs through is not
whole there, so no replacement finds it, and all but its last bytes were quoted. What
ends the head and could begin a secret is dropped before the rest is redacted.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from urllib.parse import unquote, unquote_plus

import httpx

__all__ = ["MIN_CHARS", "REDACTED", "redacted", "redacted_head", "request_secrets"]

MIN_CHARS = 8
REDACTED = b"[redacted]"


def request_secrets(url: str, headers: Mapping[str, str]) -> tuple[bytes, ...]:
    """What a request to ``url`` with ``headers`` carries that a quote must not, longest
    first (so a secret inside a longer one is never half replaced)."""
    found: set[str] = set()
    for value in headers.values():
        found.update((value, *value.split()))
    sent = httpx.URL(url)
    query = sent.query.decode("ascii")
    if query:
        found.update((query, unquote_plus(query)))
        for pair in query.split("&"):
            value = pair.partition("=")[2]
            found.update((value, unquote(value), unquote_plus(value)))
    if sent.userinfo:
        user, password = sent.username, sent.password
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        found.update((sent.userinfo.decode("ascii"), password, f"{user}:{password}", token))
    return tuple(sorted((s.encode() for s in found if len(s) >= MIN_CHARS),
                        key=len, reverse=True))


def redacted(body: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """``body`` with each of ``secrets`` replaced by ``[redacted]``."""
    for secret in secrets:
        body = body.replace(secret, REDACTED)
    return body


def redacted_head(head: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """The first bytes of a body, ``head``, redacted, without the bytes at its end that
    begin one of ``secrets`` (the cut ran through it: see the module's docstring)."""
    return redacted(head[:len(head) - _secret_begun(head, secrets)], secrets)


def _secret_begun(head: bytes, secrets: tuple[bytes, ...]) -> int:
    """How many bytes at the end of ``head``, at the most, begin one of ``secrets``."""
    longest = max(map(len, secrets), default=0)
    for size in range(min(longest - 1, len(head)), 0, -1):
        tail = head[-size:]
        if any(len(secret) > size and secret.startswith(tail) for secret in secrets):
            return size
    return 0
