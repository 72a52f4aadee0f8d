"""The V8 ``Date`` composers: parsed numbers to an exact JS time value.

Part of the port of V8's ``DateParser`` (``jsdate``): the ``DayComposer``,
``TimeComposer`` and ``TimeZoneComposer`` that the ISO and legacy parsers
fill, with V8's rules for which number is the year, month or day, 2-digit
years, 12-hour clocks and ``24:00``; then ECMAScript ``MakeDay`` /
``MakeDate`` / ``TimeClip`` in exact integer milliseconds (local time is
UTC: only an explicit offset shifts). Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.agui.jsdate_scan import NONE, Scanner, between, is_day, is_hour, is_minute, is_month

_MAX_TIME_MS = 8_640_000_000_000_000  # ECMAScript TimeClip bound.
_MAX_YEAR = 1_000_000  # V8 MakeDay refuses |year| beyond this.
_SMI_MAX = 2**31 - 1  # Smi::kMaxValue on 64-bit V8 without pointer compression.
_MS_PER_DAY = 86_400_000


# ---------------------------------------------------------------------------
# Composers (V8 DayComposer, TimeComposer, TimeZoneComposer)
# ---------------------------------------------------------------------------


class Day:
    def __init__(self) -> None:
        self.comps: list[int] = []
        self.named_month = NONE
        self.is_iso = False

    def add(self, n: int) -> bool:
        if len(self.comps) >= 3:
            return False
        self.comps.append(n)
        return True

    def write(self) -> tuple[int, int, int] | None:
        """Return (year, month 1-12, day) or None; V8 DayComposer::Write."""
        if not self.comps:
            return None
        c = self.comps + [1] * (3 - len(self.comps))  # month/day default to 1
        if self.named_month == NONE:
            if self.is_iso or not is_day(c[0]):
                year, month, day = c
            else:
                month, day, year = c
        else:
            month = self.named_month
            year, day = (c[0], c[1]) if not is_day(c[0]) else (c[1], c[0])
        if not self.is_iso:
            year += 2000 if between(year, 0, 49) else 1900 if between(year, 50, 99) else 0
        if not (is_month(month) and is_day(day)):
            return None
        return year, month, day


class Time:
    def __init__(self) -> None:
        self.comps: list[int] = []
        self.hour_offset = NONE

    def is_empty(self) -> bool:
        return not self.comps

    def is_expecting(self, n: int) -> bool:
        index = len(self.comps)
        return (index in (1, 2) and is_minute(n)) or (index == 3 and between(n, 0, 999))

    def add(self, n: int) -> bool:
        if len(self.comps) >= 4:
            return False
        self.comps.append(n)
        return True

    def add_final(self, n: int) -> None:
        if self.add(n):
            self.comps += [0] * (4 - len(self.comps))

    def write(self) -> int | None:
        """Return milliseconds since midnight or None; V8 TimeComposer::Write."""
        hour, minute, second, ms = self.comps + [0] * (4 - len(self.comps))
        if self.hour_offset != NONE:
            if not between(hour, 0, 12):
                return None
            hour = hour % 12 + self.hour_offset
        in_range = is_hour(hour) and is_minute(minute) and is_minute(second)
        if not (in_range and between(ms, 0, 999)) and (hour, minute, second, ms) != (24, 0, 0, 0):
            return None
        return ((hour * 60 + minute) * 60 + second) * 1000 + ms


class Zone:
    def __init__(self) -> None:
        self.sign = NONE
        self.hour = NONE
        self.minute = NONE

    def set_hours(self, offset_in_hours: int) -> None:
        self.sign = -1 if offset_in_hours < 0 else 1
        self.hour, self.minute = abs(offset_in_hours), 0

    def is_expecting(self, n: int) -> bool:
        return self.hour != NONE and self.minute == NONE and is_minute(n)

    def is_utc(self) -> bool:
        return self.hour == 0 and self.minute == 0

    def is_empty(self) -> bool:
        return self.hour == NONE

    def write(self) -> tuple[bool, int | None]:
        """Return (ok, offset seconds or None for local); V8 TimeZoneComposer::Write."""
        if self.sign == NONE:
            return True, None
        hour = 0 if self.hour == NONE else self.hour
        minute = 0 if self.minute == NONE else self.minute
        total = (hour * 3600 + minute * 60) % 2**32  # V8 uses unsigned 32-bit math
        if total > _SMI_MAX:
            return False, None
        return True, -total if self.sign < 0 else total


@dataclass
class State:
    scanner: Scanner
    day: Day
    time: Time
    zone: Zone


# ---------------------------------------------------------------------------
# Time value arithmetic (ECMAScript MakeDay / MakeDate / TimeClip)
# ---------------------------------------------------------------------------


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (any year)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def time_value(ymd: tuple[int, int, int], ms_of_day: int, offset_s: int | None) -> int | None:
    year, month, day = ymd
    if abs(year) > _MAX_YEAR:
        return None
    # MakeDay(year, month, 1) + (day - 1): day 30 of February rolls over.
    local = (_days_from_civil(year, month, 1) + day - 1) * _MS_PER_DAY + ms_of_day
    # Local time is UTC for the gatekeeper, so only an explicit offset shifts.
    utc = local if offset_s is None else local - offset_s * 1000
    return utc if abs(utc) <= _MAX_TIME_MS else None
