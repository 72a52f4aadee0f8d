"""Default interrupt expiry: a TTL the runtime stamps on interrupts that carry none.

AG-UI leaves ``expiresAt`` optional and an interrupt without it waits for
ever, holding its thread. ``AGUI_DEFAULT_INTERRUPT_TTL`` (per agent
``AGUI_DEFAULT_INTERRUPT_TTL_<AGENT>``, the name upper-cased with ``-`` as
``_``) sets a deadline for those: the runtime stamps ``expiresAt = now +
TTL`` on every interrupt a run raises without one, as the run ends, so the
stamped value is the one on the wire (the ``RUN_FINISHED`` outcome), in the
checkpoint and before the gatekeeper: every client sees the same deadline.
An interrupt the agent gave an ``expiresAt`` keeps it. Unset: off, as the
protocol says.

A TTL is a number of seconds (``90``, ``1.5``) or one duration with a unit
(``90s``, ``15m``, ``24h``, ``7d``, ``500ms``); anything else is refused at
startup with the variable named. Pure: parsing and stamping take no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from ag_ui.core import Interrupt

VARIABLE = "AGUI_DEFAULT_INTERRUPT_TTL"

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?")
_LONGEST = timedelta(days=3650)
"""Ten years: a longer TTL is a typo, not a deadline (and stays in JS Date's range)."""


class DurationError(ValueError):
    """A TTL setting that is not a duration (the message names the variable)."""


def parse_duration(raw: str, variable: str = VARIABLE) -> timedelta:
    """``raw`` as a positive duration: seconds, or a number with ``ms|s|m|h|d``."""
    match = _DURATION.fullmatch(raw.strip().lower())
    if match is None:
        raise DurationError(f"{variable}={raw!r} is not a duration: give seconds (90) "
                            "or a number with a unit (90s, 15m, 24h, 7d)")
    amount = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if amount < 0.001:
        raise DurationError(f"{variable}={raw!r}: a TTL must be at least 1 ms")
    ttl = timedelta(seconds=amount)
    if ttl > _LONGEST:
        raise DurationError(f"{variable}={raw!r}: longer than 3650 days")
    return ttl


def agent_variable(agent: str) -> str:
    """The per-agent override of the default TTL (``AGUI_DEFAULT_INTERRUPT_TTL_APPROVAL``)."""
    return f"{VARIABLE}_{agent.upper().replace('-', '_')}"


def interrupt_ttls(agents: Iterable[str], env: Mapping[str, str]) -> dict[str, timedelta | None]:
    """Each agent's TTL: its own variable, else the default, else None (off).

    Raises ``DurationError`` naming the first variable that is not a duration,
    so a worker refuses to start rather than run without the deadline asked for.
    """
    default_raw = (env.get(VARIABLE) or "").strip()
    default = parse_duration(default_raw) if default_raw else None
    ttls: dict[str, timedelta | None] = {}
    for agent in agents:
        variable = agent_variable(agent)
        own = (env.get(variable) or "").strip()
        ttls[agent] = parse_duration(own, variable) if own else default
    return ttls


def check_settings(env: Mapping[str, str]) -> None:
    """Refuse (``DurationError``) any ``AGUI_DEFAULT_INTERRUPT_TTL[_<AGENT>]`` that is
    no duration, whichever agents end up hosted (so a typo stops the worker at startup)."""
    for variable, raw in sorted(env.items()):
        if (variable == VARIABLE or variable.startswith(VARIABLE + "_")) and raw.strip():
            parse_duration(raw, variable)


def iso_instant(when: datetime) -> str:
    """An aware datetime as ISO 8601 UTC with milliseconds and ``Z`` (what JS Date reads)."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def deadline(now: datetime, ttl: timedelta) -> str:
    """``now + ttl`` as the ``expiresAt`` string stamped on the wire."""
    return iso_instant(now + ttl)


def stamped(interrupt: Interrupt, expires_at: str) -> Interrupt:
    """``interrupt`` with ``expires_at`` when it carries none (else unchanged)."""
    if interrupt.expires_at is not None:
        return interrupt
    return interrupt.model_copy(update={"expires_at": expires_at})
