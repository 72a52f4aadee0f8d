"""API keys: which bearer token belongs to which tenant, and looking one up safely.

Keys come from ``AGUI_API_KEYS`` (``token=tenant`` pairs, comma separated)
and/or ``AGUI_API_KEYS_FILE`` (one ``token tenant`` or ``token=tenant`` per
line; blank lines and ``#`` comments ignored). A token may itself contain
``=`` (base64 padding): the tenant is what follows the *last* ``=``. The same
token given twice for two tenants is refused, so no request can be
attributed to the wrong one.

Only SHA-256 digests of the tokens are kept, never the tokens, so nothing
that holds an ``ApiKeys`` (a repr, a traceback, a debugger) can show one.
``tenant_for`` digests the presented token and compares it with *every*
digest with ``hmac.compare_digest``, without stopping at a match, so neither
the position of a match nor the length of the token changes the time it
takes. Parse errors name the source and line, never the line's text.
Pure but for ``load`` (which reads the file).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:/+-]{0,127}")
"""A tenant name: it travels in RunRequest.principal and in logs, so plain text only."""
SHORT_TOKEN = 16
"""Tokens shorter than this are accepted with a warning (guessable)."""


class KeyConfigError(ValueError):
    """The keys configuration cannot be read; the message never contains a token."""


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """Token digests and the tenant each maps to."""

    entries: tuple[tuple[bytes, str], ...]
    short: tuple[str, ...] = ()
    """Tenants with a token shorter than ``SHORT_TOKEN`` (for a startup warning)."""

    def __repr__(self) -> str:
        return f"ApiKeys({len(self.entries)} keys, tenants={sorted(self.tenants)})"

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(tenant for _, tenant in self.entries)

    def tenant_for(self, token: str) -> str | None:
        """The tenant of ``token``, or None; constant time in the token's value."""
        digest = _digest(token)
        found: str | None = None
        for known, tenant in self.entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = tenant
        return found


def parse(text: str, source: str, *, lines: bool) -> Iterator[tuple[str, str]]:
    """``(token, tenant)`` pairs of one source: comma separated (env) or one per line (file)."""
    items = text.splitlines() if lines else text.split(",")
    for number, raw in enumerate(items, 1):
        item = raw.strip()
        if not item or (lines and item.startswith("#")):
            continue
        where = f"{source} line {number}" if lines else f"{source} entry {number}"
        if lines and len(item.split()) == 2:
            token, tenant = item.split()
        elif "=" in item:
            token, _, tenant = item.rpartition("=")
        else:
            raise KeyConfigError(f"{where}: expected token=tenant" +
                                 (" or 'token tenant'" if lines else ""))
        token, tenant = token.strip(), tenant.strip()
        if not token or any(c.isspace() for c in token):
            raise KeyConfigError(f"{where}: the token is empty or contains whitespace")
        if not TENANT.fullmatch(tenant):
            raise KeyConfigError(f"{where}: the tenant name must match {TENANT.pattern}")
        yield token, tenant


def build(pairs: Iterable[tuple[str, str]]) -> ApiKeys:
    """The keys of ``pairs``; a token mapped to two tenants is refused."""
    tenants: dict[bytes, str] = {}
    short: set[str] = set()
    for token, tenant in pairs:
        digest = _digest(token)
        if tenants.setdefault(digest, tenant) != tenant:
            raise KeyConfigError(f"one API key is given for two tenants "
                                 f"({tenants[digest]!r} and {tenant!r})")
        if len(token) < SHORT_TOKEN:
            short.add(tenant)
    return ApiKeys(tuple(tenants.items()), tuple(sorted(short)))


def load(env_value: str | None, file: Path | None) -> ApiKeys | None:
    """The configured keys, or None when there are none (authentication off)."""
    pairs = list(parse(env_value or "", "AGUI_API_KEYS", lines=False))
    if file is not None:
        try:
            text = file.read_text("utf-8")
        except OSError as exc:
            raise KeyConfigError(f"AGUI_API_KEYS_FILE {file}: {exc.strerror or exc}") from None
        pairs += parse(text, f"AGUI_API_KEYS_FILE {file}", lines=True)
    if not pairs:
        if file is not None:
            raise KeyConfigError(f"AGUI_API_KEYS_FILE {file} names no key; authentication "
                                 "would be off: unset it, or add 'token tenant' lines")
        return None
    return build(pairs)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()
