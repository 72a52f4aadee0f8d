"""The expiry rule: is an interrupt expired, exactly as the AG-UI reference client decides.

AG-UI 1.0 interrupts carry an optional ``expiresAt`` string whose format the
protocol does not constrain; ``@ag-ui/client`` decides::

    isInterruptExpired(i, now) =
        i.expiresAt !== undefined && new Date(i.expiresAt) <= now

so an ``expiresAt`` means whatever V8's ``Date`` parser makes of it
(``jsdate``), and one it cannot read (Invalid Date) NEVER expires. The
gatekeeper decides resumes by this rule, the CLI shows time left by it and
the census counts stale interrupts by it, so they never disagree. Decisions
compare exact JS milliseconds, never a clamped ``datetime``. Pure: the
clock is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from contracts.limits import EXPIRES_AT_MAX_LENGTH
from services.agui.jsdate import from_epoch_ms, parse_js_epoch_ms, to_epoch_ms

__all__ = ["Expiry", "is_expired", "read_expiry"]


@dataclass(frozen=True)
class Expiry:
    """How the reference client reads one ``expiresAt`` value.

    ``epoch_ms`` is the exact JS time value (None: absent or Invalid Date);
    ``unparseable`` is True when a value was present but is Invalid Date, so
    the gatekeeper can warn that the interrupt will never expire.
    """

    epoch_ms: int | None
    unparseable: bool

    @property
    def at(self) -> datetime | None:
        """The instant as an aware UTC datetime (clamped to datetime's range)."""
        return None if self.epoch_ms is None else from_epoch_ms(self.epoch_ms)

    def is_expired(self, now: datetime) -> bool:
        """``new Date(expiresAt) <= now`` at millisecond precision."""
        return self.epoch_ms is not None and self.epoch_ms <= to_epoch_ms(now)


def read_expiry(expires_at: str | None) -> Expiry:
    """Read an interrupt's optional ``expiresAt`` the way ``@ag-ui/client`` does.

    One longer than a date may be (``EXPIRES_AT_MAX_LENGTH``, 128) is not parsed: it reads
    as unparseable, never expiring. No run's end carries one (the worker and the
    gatekeeper refuse it), but a thread state another client wrote may, and parsing
    as V8 does takes time in the length: 1 MiB of it froze every consumer instance
    and the notifier for 2.4 s (found by review).
    """
    if expires_at is None:
        return Expiry(epoch_ms=None, unparseable=False)
    if len(expires_at) > EXPIRES_AT_MAX_LENGTH:
        return Expiry(epoch_ms=None, unparseable=True)
    ms = parse_js_epoch_ms(expires_at)
    return Expiry(epoch_ms=ms, unparseable=ms is None)


def is_expired(expires_at: str | None, now: datetime) -> bool:
    """``isInterruptExpired``: False when absent or unparseable, else ``at <= now``.

    ``now`` must be aware; it is floored to milliseconds like ``new Date()``.
    """
    return read_expiry(expires_at).is_expired(now)
