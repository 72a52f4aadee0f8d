"""API keys: which bearer token belongs to which tenant (and person), and looking one up safely.

Keys come from ``AGUI_API_KEYS`` (``token=tenant`` or ``token=tenant#name``
pairs, comma separated) and/or ``AGUI_API_KEYS_FILE`` (one ``token tenant``
or ``token=tenant`` per line, either with ``#name``; blank lines and lines
starting with ``#`` ignored). A token may itself contain ``=`` (base64
padding): the principal is what follows the *last* ``=``. The optional key
name tells the people (or programs) of one tenant apart: ``tenant-a#alice``
and ``tenant-a#bob`` share tenant a's threads, but each answer is recorded
as its key's. ``#`` is the separator because no tenant name may contain it
(``:`` and ``/`` may), so every configuration written before names existed
still reads the same; a key without a name is the tenant's, as before. The
same token given twice for two principals is refused, so no request can be
attributed to the wrong one.

Only SHA-256 digests of the tokens are kept, never the tokens, so nothing
that holds an ``ApiKeys`` (a repr, a traceback, a debugger) can show one.
``key_for`` digests the presented token and compares it with *every*
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

from contracts.records import KEY_NAME_SEPARATOR, identity

TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:/+-]{0,127}")
"""A tenant name: it travels in RunRequest.principal and in logs, so plain text only."""
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:/+-]{0,126}")
"""A key's name (RunRequest.keyName): as plain as a tenant, and short enough that
``tenant#name`` stays within the default id length (256)."""
SHORT_TOKEN = 16
"""Tokens shorter than this are accepted with a warning (guessable)."""


class KeyConfigError(ValueError):
    """The keys configuration cannot be read; the message never contains a token."""


@dataclass(frozen=True, slots=True)
class Key:
    """Who a key speaks for: its tenant (who owns threads) and, optionally, its name."""

    tenant: str
    name: str | None = None

    def __str__(self) -> str:
        return identity(self.tenant, self.name) or self.tenant


@dataclass(frozen=True, slots=True)
class ApiKeys:
    """Token digests and the key each maps to."""

    entries: tuple[tuple[bytes, Key], ...]
    short: tuple[str, ...] = ()
    """Keys (``tenant#name``) with a token shorter than ``SHORT_TOKEN`` (for a startup warning)."""

    def __repr__(self) -> str:
        return f"ApiKeys({len(self.entries)} keys, tenants={sorted(self.tenants)})"

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(key.tenant for _, key in self.entries)

    def key_for(self, token: str) -> Key | None:
        """The key ``token`` is, or None; constant time in the token's value."""
        digest = _digest(token)
        found: Key | None = None
        for known, key in self.entries:
            if hmac.compare_digest(digest, known) and found is None:
                found = key
        return found


def parse(text: str, source: str, *, lines: bool) -> Iterator[tuple[str, Key]]:
    """``(token, key)`` pairs of one source: comma separated (env) or one per line (file)."""
    items = text.splitlines() if lines else text.split(",")
    for number, raw in enumerate(items, 1):
        item = raw.strip()
        if not item or (lines and item.startswith("#")):
            continue
        where = f"{source} line {number}" if lines else f"{source} entry {number}"
        if lines and len(item.split()) == 2:
            token, principal = item.split()
        elif "=" in item:
            token, _, principal = item.rpartition("=")
        else:
            raise KeyConfigError(f"{where}: expected token=tenant or token=tenant#name" +
                                 (" or 'token tenant[#name]'" if lines else ""))
        token, principal = token.strip(), principal.strip()
        if not token or any(c.isspace() for c in token):
            raise KeyConfigError(f"{where}: the token is empty or contains whitespace")
        if not (token.isascii() and token.isprintable()):
            # a header carries bytes: a token past ASCII matched only when a client sent
            # it as Latin-1, and one past Latin-1 never (found by probing)
            raise KeyConfigError(f"{where}: the token must be printable ASCII")
        yield token, _key(principal, where)


def _key(principal: str, where: str) -> Key:
    tenant, named, name = principal.partition(KEY_NAME_SEPARATOR)
    if not TENANT.fullmatch(tenant):
        raise KeyConfigError(f"{where}: the tenant name must match {TENANT.pattern}")
    if named and not KEY_NAME.fullmatch(name):
        raise KeyConfigError(f"{where}: the key name after {KEY_NAME_SEPARATOR!r} must match "
                             f"{KEY_NAME.pattern}")
    return Key(tenant, name if named else None)


def build(pairs: Iterable[tuple[str, Key]]) -> ApiKeys:
    """The keys of ``pairs``; a token given for two different keys is refused."""
    keys: dict[bytes, Key] = {}
    short: set[str] = set()
    for token, key in pairs:
        digest = _digest(token)
        if keys.setdefault(digest, key) != key:
            raise KeyConfigError(f"one API key is given for two principals "
                                 f"({str(keys[digest])!r} and {str(key)!r})")
        if len(token) < SHORT_TOKEN:
            short.add(str(key))
    return ApiKeys(tuple(keys.items()), tuple(sorted(short)))


def load(env_value: str | None, file: Path | None) -> ApiKeys | None:
    """The configured keys, or None when there are none (authentication off)."""
    pairs = list(parse(env_value or "", "AGUI_API_KEYS", lines=False))
    if file is not None:
        try:
            text = file.read_text("utf-8-sig")  # an editor's BOM is not part of line 1
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
