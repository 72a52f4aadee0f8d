"""Read an interrupt's ``expiresAt`` exactly as the AG-UI reference client does.

Why this module exists
----------------------
AG-UI 1.0 interrupts carry an optional ``expiresAt`` *string* whose format the
protocol does not constrain. The reference consumer (``@ag-ui/client``)
decides expiry as::

    isInterruptExpired(i, now) =
        i.expiresAt !== undefined && new Date(i.expiresAt) <= now

so the meaning of ``expiresAt`` is, by definition, whatever V8's ``Date``
string parser makes of it. In particular an unparseable string is an
*Invalid Date*, every comparison with it is false, and such an interrupt
NEVER expires. If the gatekeeper used ``datetime.fromisoformat`` or similar it
would disagree with the reference client on a long tail of inputs (date-only
forms, ``"2026-11-30 10:00:00Z"``, RFC 2822, ``toString()`` output, 2-digit
years, more than three fractional digits, ``24:00``, ...). Instead this module
is a faithful port of V8's ``DateParser`` (``src/date/dateparser*.{h,cc}``, as
shipped in Node 20 / V8 11.3): first the ES5 ISO fast path, then the legacy
"Safari compatible" heuristics, then ``MakeDay``/``MakeTime``/``TimeClip``.
Golden vectors in ``tests/unit/expiry_vectors.json`` are produced by Node
itself, and a test compares against a live ``node`` on random inputs.

Local time
----------
ECMAScript reads date-time forms *without* an offset (``"2026-11-30T10:00"``,
``"Nov 30, 2026 10:00"``) as LOCAL time. The gatekeeper defines local time as
UTC: it has TZ=UTC semantics, which is exactly how Node behaves in our UTC
containers. Date-only ISO forms (``"2026-11-30"``) are UTC per the spec anyway.

Precision and range
-------------------
JS time values are integer milliseconds in ``[-8.64e15, 8.64e15]`` (about
years -271821 .. 275760). :func:`parse_js_epoch_ms` returns that exact value.
``datetime`` only spans years 1..9999, so :func:`parse_js_date` clamps values
outside that span to the nearest representable millisecond; expiry decisions
never use the clamped value, they compare exact milliseconds.

Known gaps vs V8: none known for Node 20 (golden vectors plus >300k random
strings agree). Behaviour is pinned to V8 11.3's parser, quirks included:
leading zeros are skipped before the 9-significant-digit cap, so a fraction of
more than 9 digits can read too large (``".00051234567"`` is 51 ms); ISO
day-of-month 29..31 rolls over (``"2026-02-30"`` is March 2nd); legacy 2-digit
years map to 1950..2049 (``"0049-01-01 10:00"`` is 2049); U+2028/U+2029 and
U+200B are word characters, not whitespace; a NUL ends the input. A newer Node
may parse legacy forms differently: the golden-vector test regenerates the
vectors with the installed ``node`` and fails on any drift. Other engines
(SpiderMonkey, JSC) accept different legacy forms; they are not the reference
consumer.

The module is pure: no I/O, no clock reads, stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum

__all__ = [
    "Expiry",
    "is_expired",
    "parse_js_date",
    "parse_js_epoch_ms",
    "read_expiry",
    "to_epoch_ms",
]

# ---------------------------------------------------------------------------
# Constants mirrored from V8
# ---------------------------------------------------------------------------

_MAX_TIME_MS = 8_640_000_000_000_000  # ECMAScript TimeClip bound.
_MAX_YEAR = 1_000_000  # V8 MakeDay refuses |year| beyond this.
_MAX_SIGNIFICANT_DIGITS = 9  # V8 keeps 9 significant digits of a numeral.
_SMI_MAX = 2**31 - 1  # Smi::kMaxValue on 64-bit V8 without pointer compression.
_NONE = 2**31 - 1  # V8's kNone ("missing") sentinel (kMaxInt).
_MS_PER_DAY = 86_400_000

_UTC = UTC
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_ONE_MS = timedelta(milliseconds=1)
_DATETIME_MIN = datetime(1, 1, 1, tzinfo=_UTC)
_DATETIME_MAX = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=_UTC)

# ECMAScript WhiteSpace (V8 IsWhiteSpace) as UTF-16 code units. U+0085 and
# U+180E are not in it. V8 never lets these start or continue a word.
_WHITESPACE = frozenset(
    [0x09, 0x0B, 0x0C, 0x20, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000, 0xFEFF]
)
# ...and LineTerminator. U+2028/U+2029 are ">= 'A'", so V8 reads them as word
# characters (garbage after a number); only \n and \r act as whitespace.
_LINE_TERMINATORS = frozenset([0x0A, 0x0D, 0x2028, 0x2029])


_SYMBOLS = frozenset(map(ord, ":-+.)"))  # V8 returns these as symbol tokens


class _Kind(Enum):
    NUMBER = "number"
    SYMBOL = "symbol"  # one of : - + . )
    WORD = "word"  # a keyword-table lookup result, see _KeywordType
    WHITESPACE = "whitespace"
    UNKNOWN = "unknown"  # any other character, or a (parenthesised) run
    END = "end"
    INVALID = "invalid"  # terminal failure signalled by the ES5 parser


class _KeywordType(Enum):
    GARBAGE = "garbage"  # V8's INVALID keyword type: a word not in the table
    MONTH_NAME = "month"
    TIME_ZONE_NAME = "zone"
    TIME_SEPARATOR = "T"
    AM_PM = "ampm"


# V8 KeywordTable: 3-letter lower-case prefix -> (type, value). Only month
# names may be longer than their prefix ("November", "Marchxyz").
_KEYWORDS: dict[str, tuple[_KeywordType, int]] = {
    **{
        name: (_KeywordType.MONTH_NAME, index + 1)
        for index, name in enumerate(
            ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        )
    },
    "am": (_KeywordType.AM_PM, 0),
    "pm": (_KeywordType.AM_PM, 12),
    "ut": (_KeywordType.TIME_ZONE_NAME, 0),
    "utc": (_KeywordType.TIME_ZONE_NAME, 0),
    "z": (_KeywordType.TIME_ZONE_NAME, 0),
    "gmt": (_KeywordType.TIME_ZONE_NAME, 0),
    "cdt": (_KeywordType.TIME_ZONE_NAME, -5),
    "cst": (_KeywordType.TIME_ZONE_NAME, -6),
    "edt": (_KeywordType.TIME_ZONE_NAME, -4),
    "est": (_KeywordType.TIME_ZONE_NAME, -5),
    "mdt": (_KeywordType.TIME_ZONE_NAME, -6),
    "mst": (_KeywordType.TIME_ZONE_NAME, -7),
    "pdt": (_KeywordType.TIME_ZONE_NAME, -7),
    "pst": (_KeywordType.TIME_ZONE_NAME, -8),
    "t": (_KeywordType.TIME_SEPARATOR, 0),
}


def _between(x: int, lo: int, hi: int) -> bool:
    return lo <= x <= hi


def _is_month(x: int) -> bool:
    return _between(x, 1, 12)


def _is_day(x: int) -> bool:
    return _between(x, 1, 31)


def _is_hour(x: int) -> bool:
    return _between(x, 0, 23)


def _is_minute(x: int) -> bool:  # also V8's IsSecond
    return _between(x, 0, 59)


# ---------------------------------------------------------------------------
# Tokenizer (V8 InputReader + DateStringTokenizer)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: _Kind
    value: int = 0  # number value, symbol code point, or keyword value
    length: int = 0  # characters consumed (numbers count leading zeros)
    keyword: _KeywordType | None = None

    def is_number(self, length: int | None = None) -> bool:
        return self.kind is _Kind.NUMBER and (length is None or self.length == length)

    def is_symbol(self, char: str) -> bool:
        return self.kind is _Kind.SYMBOL and self.value == ord(char)

    def is_sign(self) -> bool:
        return self.is_symbol("+") or self.is_symbol("-")

    def sign(self) -> int:
        return 1 if self.is_symbol("+") else -1

    def is_keyword(self, keyword: _KeywordType) -> bool:
        return self.kind is _Kind.WORD and self.keyword is keyword

    def is_z(self) -> bool:
        """V8 IsKeywordZ: a one-letter UTC zone name, i.e. ``Z``/``z``."""
        return self.is_keyword(_KeywordType.TIME_ZONE_NAME) and self.length == 1


_END = _Token(_Kind.END)
_INVALID = _Token(_Kind.INVALID)


def _utf16_units(text: str) -> list[int]:
    """Code units as JS sees them, cut at the first NUL (V8 treats 0 as end)."""
    raw = text.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)]
    return units[: units.index(0)] if 0 in units else units


class _Scanner:
    """One-token-lookahead scanner over UTF-16 code units."""

    def __init__(self, text: str) -> None:
        self._units = _utf16_units(text)
        self._pos = 0
        self._next = self._scan()

    def peek(self) -> _Token:
        return self._next

    def next(self) -> _Token:
        token, self._next = self._next, self._scan()
        return token

    def skip_symbol(self, char: str) -> bool:
        if self._next.is_symbol(char):
            self._next = self._scan()
            return True
        return False

    def _ch(self) -> int:
        return self._units[self._pos] if self._pos < len(self._units) else 0

    def _scan(self) -> _Token:
        ch = self._ch()
        if ch == 0:
            return _END
        if 0x30 <= ch <= 0x39:
            return self._scan_number()
        if ch in _SYMBOLS:
            self._pos += 1
            return _Token(_Kind.SYMBOL, ch, 1)
        if ch >= 0x41 and ch not in _WHITESPACE:  # V8: ">= 'A'" is a word char
            return self._scan_word()
        self._pos += 1
        if ch in _WHITESPACE or ch in _LINE_TERMINATORS:
            return _Token(_Kind.WHITESPACE, 0, 1)
        if ch == 0x28:  # '('
            self._skip_parenthesised()
        return _Token(_Kind.UNKNOWN, 0, 1)

    def _scan_number(self) -> _Token:
        start = self._pos
        while self._ch() == 0x30:  # leading zeros are not significant
            self._pos += 1
        value, digits = 0, 0
        while 0x30 <= self._ch() <= 0x39:
            if digits < _MAX_SIGNIFICANT_DIGITS:
                value = value * 10 + self._ch() - 0x30
            digits += 1
            self._pos += 1
        return _Token(_Kind.NUMBER, value, self._pos - start)

    def _scan_word(self) -> _Token:
        start = self._pos
        while (ch := self._ch()) >= 0x41 and ch not in _WHITESPACE:
            self._pos += 1
        length = self._pos - start
        # V8 lower-cases with "| 0x20" and only compares a 3-unit prefix.
        prefix = "".join(chr(u | 0x20) for u in self._units[start : start + min(length, 3)])
        kind, value = _KEYWORDS.get(prefix, (_KeywordType.GARBAGE, 0))
        if length > 3 and kind is not _KeywordType.MONTH_NAME:
            kind, value = _KeywordType.GARBAGE, 0
        return _Token(_Kind.WORD, value, length, kind)

    def _skip_parenthesised(self) -> None:
        depth = 1  # the '(' itself was consumed by the caller
        while depth > 0 and (ch := self._ch()) != 0:
            depth += 1 if ch == 0x28 else -1 if ch == 0x29 else 0
            self._pos += 1


def _read_milliseconds(token: _Token) -> int:
    """V8 ReadMilliseconds: scale a fraction numeral to three digits."""
    number, length = token.value, token.length
    if length < 3:
        return number * (100 if length == 1 else 10)
    # Only 9 significant digits were kept, but the divisor is capped too, so a
    # fraction longer than 9 digits with leading zeros reads too large (V8 quirk).
    divisor: int = 10 ** (min(length, _MAX_SIGNIFICANT_DIGITS) - 3)
    return number // divisor


# ---------------------------------------------------------------------------
# Composers (V8 DayComposer, TimeComposer, TimeZoneComposer)
# ---------------------------------------------------------------------------


class _Day:
    def __init__(self) -> None:
        self.comps: list[int] = []
        self.named_month = _NONE
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
        if self.named_month == _NONE:
            if self.is_iso or not _is_day(c[0]):
                year, month, day = c
            else:
                month, day, year = c
        else:
            month = self.named_month
            year, day = (c[0], c[1]) if not _is_day(c[0]) else (c[1], c[0])
        if not self.is_iso:
            year += 2000 if _between(year, 0, 49) else 1900 if _between(year, 50, 99) else 0
        if not (_is_month(month) and _is_day(day)):
            return None
        return year, month, day


class _Time:
    def __init__(self) -> None:
        self.comps: list[int] = []
        self.hour_offset = _NONE

    def is_empty(self) -> bool:
        return not self.comps

    def is_expecting(self, n: int) -> bool:
        index = len(self.comps)
        return (index in (1, 2) and _is_minute(n)) or (index == 3 and _between(n, 0, 999))

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
        if self.hour_offset != _NONE:
            if not _between(hour, 0, 12):
                return None
            hour = hour % 12 + self.hour_offset
        in_range = _is_hour(hour) and _is_minute(minute) and _is_minute(second)
        if not (in_range and _between(ms, 0, 999)) and (hour, minute, second, ms) != (24, 0, 0, 0):
            return None
        return ((hour * 60 + minute) * 60 + second) * 1000 + ms


class _Zone:
    def __init__(self) -> None:
        self.sign = _NONE
        self.hour = _NONE
        self.minute = _NONE

    def set_hours(self, offset_in_hours: int) -> None:
        self.sign = -1 if offset_in_hours < 0 else 1
        self.hour, self.minute = abs(offset_in_hours), 0

    def is_expecting(self, n: int) -> bool:
        return self.hour != _NONE and self.minute == _NONE and _is_minute(n)

    def is_utc(self) -> bool:
        return self.hour == 0 and self.minute == 0

    def is_empty(self) -> bool:
        return self.hour == _NONE

    def write(self) -> tuple[bool, int | None]:
        """Return (ok, offset seconds or None for local); V8 TimeZoneComposer::Write."""
        if self.sign == _NONE:
            return True, None
        hour = 0 if self.hour == _NONE else self.hour
        minute = 0 if self.minute == _NONE else self.minute
        total = (hour * 3600 + minute * 60) % 2**32  # V8 uses unsigned 32-bit math
        if total > _SMI_MAX:
            return False, None
        return True, -total if self.sign < 0 else total


@dataclass
class _State:
    scanner: _Scanner
    day: _Day
    time: _Time
    zone: _Zone


# ---------------------------------------------------------------------------
# ES5 / ISO fast path (V8 ParseES5DateTime)
# ---------------------------------------------------------------------------


def _parse_es5(st: _State) -> _Token:
    """Parse as much ISO as possible; return the first token left for legacy.

    Returns ``_END`` on a complete ISO parse and ``_INVALID`` once a ``T`` has
    committed the input to ISO but the rest does not conform.
    """
    sc = st.scanner
    if sc.peek().is_sign():
        sign_token = sc.next()
        if not sc.peek().is_number(6):
            return sign_token
        year = sc.next().value
        if sign_token.sign() < 0 and year == 0:
            return sign_token  # "-000000" is not a year
        st.day.add(sign_token.sign() * year)
    elif sc.peek().is_number(4):
        st.day.add(sc.next().value)
    else:
        return sc.next()
    if (leftover := _parse_es5_month_day(st)) is not None:
        return leftover
    if not sc.peek().is_keyword(_KeywordType.TIME_SEPARATOR):
        if sc.peek().kind is not _Kind.END:
            return sc.next()
    elif not _parse_es5_time(st) or not _parse_es5_offset(st) or sc.peek().kind is not _Kind.END:
        return _INVALID
    if st.zone.is_empty() and st.time.is_empty():
        st.zone.set_hours(0)  # date-only forms are UTC
    st.day.is_iso = True
    return _END


def _parse_es5_month_day(st: _State) -> _Token | None:
    sc = st.scanner
    for valid in (_is_month, _is_day):
        if not sc.skip_symbol("-"):
            return None
        if not (sc.peek().is_number(2) and valid(sc.peek().value)):
            return sc.next()
        st.day.add(sc.next().value)
    return None


def _parse_es5_time(st: _State) -> bool:
    """``T`` HH:mm[:ss[.fraction]]; 24 only as 24:00[:00[.0…]]."""
    sc = st.scanner
    sc.next()  # the 'T'
    if not (sc.peek().is_number(2) and _between(sc.peek().value, 0, 24)):
        return False
    hour_is_24 = sc.peek().value == 24
    st.time.add(sc.next().value)

    def two_digit_field() -> bool:
        token = sc.peek()
        if not (token.is_number(2) and _is_minute(token.value)) or (hour_is_24 and token.value > 0):
            return False
        st.time.add(sc.next().value)
        return True

    if not sc.skip_symbol(":") or not two_digit_field():
        return False
    if not sc.skip_symbol(":"):
        return True
    if not two_digit_field():
        return False
    if sc.skip_symbol("."):
        if not sc.peek().is_number() or (hour_is_24 and sc.peek().value > 0):
            return False
        st.time.add(_read_milliseconds(sc.next()))
    return True


def _parse_es5_offset(st: _State) -> bool:
    """Optional ``Z`` | ±hh:mm | ±hhmm after an ISO time."""
    sc = st.scanner
    if sc.peek().is_z():
        sc.next()
        st.zone.set_hours(0)
        return True
    if not sc.peek().is_sign():
        return True
    st.zone.sign = sc.next().sign()
    if sc.peek().is_number(4):
        hour, minute = divmod(sc.next().value, 100)
    else:
        if not (sc.peek().is_number(2) and _is_hour(sc.peek().value)):
            return False
        hour = sc.next().value
        if not (sc.skip_symbol(":") and sc.peek().is_number(2)):
            return False
        minute = sc.next().value
    if not (_is_hour(hour) and _is_minute(minute)):
        return False
    st.zone.hour, st.zone.minute = hour, minute
    return True


# ---------------------------------------------------------------------------
# Legacy heuristics (the loop in V8 DateParser::Parse)
# ---------------------------------------------------------------------------


def _legacy_number(st: _State, token: _Token) -> bool:
    sc, time, n = st.scanner, st.time, token.value
    if sc.skip_symbol(":"):
        if sc.skip_symbol(":"):  # "n::" means n:00
            if not time.is_empty():
                return False
            time.add(n)
            time.add(0)
            return True
        if not time.add(n):
            return False
        if sc.peek().is_symbol("."):
            sc.next()
        return True
    # Note: the '.' is consumed even when the time is not expecting n.
    if sc.skip_symbol(".") and time.is_expecting(n):
        time.add(n)
        if not sc.peek().is_number():
            return False
        time.add_final(_read_milliseconds(sc.next()))
        return True
    if st.zone.is_expecting(n):
        st.zone.minute = n
        return True
    if time.is_expecting(n):
        time.add_final(n)
        after = sc.peek()  # end, whitespace, Z or a sign must follow
        return after.kind in (_Kind.END, _Kind.WHITESPACE) or after.is_z() or after.is_sign()
    if not st.day.add(n):
        return False
    sc.skip_symbol("-")
    return True


def _legacy_word(st: _State, token: _Token, has_read_number: bool) -> bool:
    if token.keyword is _KeywordType.AM_PM and not st.time.is_empty():
        st.time.hour_offset = token.value
    elif token.keyword is _KeywordType.MONTH_NAME:
        st.day.named_month = token.value
        st.scanner.skip_symbol("-")
    elif token.keyword is _KeywordType.TIME_ZONE_NAME and has_read_number:
        st.zone.set_hours(token.value)
    elif has_read_number or st.scanner.peek().is_number():
        return False  # garbage after a number, or glued to the first number
    return True


def _legacy_offset(st: _State, token: _Token) -> bool:
    """A sign after a time or a UTC zone name: ``GMT+2``, ``+0530``, ``+05:30``."""
    sc, zone = st.scanner, st.zone
    zone.sign = token.sign()
    number = sc.next() if sc.peek().is_number() else _Token(_Kind.NUMBER, 0, 0)
    if sc.peek().is_symbol(":"):
        zone.hour, zone.minute = number.value, _NONE  # minutes follow as a number
    elif number.length in (1, 2):
        zone.hour, zone.minute = number.value, 0
    elif number.length in (3, 4):
        zone.hour, zone.minute = divmod(number.value, 100)
    else:
        return False
    return True


def _parse_legacy(st: _State, token: _Token) -> bool:
    has_read_number = bool(st.day.comps)
    while token.kind is not _Kind.END:
        ok = True
        if token.kind is _Kind.NUMBER:
            has_read_number = True
            ok = _legacy_number(st, token)
        elif token.kind is _Kind.WORD:
            ok = _legacy_word(st, token, has_read_number)
        elif token.is_sign() and (st.zone.is_utc() or not st.time.is_empty()):
            has_read_number = True
            ok = _legacy_offset(st, token)
        elif (token.is_sign() or token.is_symbol(")")) and has_read_number:
            ok = False
        if not ok:
            return False
        token = st.scanner.next()
    return True


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


def _time_value(ymd: tuple[int, int, int], ms_of_day: int, offset_s: int | None) -> int | None:
    year, month, day = ymd
    if abs(year) > _MAX_YEAR:
        return None
    # MakeDay(year, month, 1) + (day - 1): day 30 of February rolls over.
    local = (_days_from_civil(year, month, 1) + day - 1) * _MS_PER_DAY + ms_of_day
    # Local time is UTC for the gatekeeper, so only an explicit offset shifts.
    utc = local if offset_s is None else local - offset_s * 1000
    return utc if abs(utc) <= _MAX_TIME_MS else None


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def parse_js_epoch_ms(text: str) -> int | None:
    """``new Date(text).getTime()`` under TZ=UTC, or None for Invalid Date."""
    st = _State(_Scanner(text), _Day(), _Time(), _Zone())
    leftover = _parse_es5(st)
    if leftover.kind is _Kind.INVALID or not _parse_legacy(st, leftover):
        return None
    ymd = st.day.write()
    ms_of_day = st.time.write() if ymd is not None else None
    zone_ok, offset_s = st.zone.write()
    if ymd is None or ms_of_day is None or not zone_ok:
        return None
    return _time_value(ymd, ms_of_day, offset_s)


def parse_js_date(text: str) -> datetime | None:
    """``new Date(text)`` as an aware UTC datetime (ms precision), or None.

    None means V8 yields Invalid Date. Valid instants before year 1 or after
    year 9999 (which JS supports but ``datetime`` does not) are clamped to
    0001-01-01T00:00:00.000Z / 9999-12-31T23:59:59.999Z; use
    :func:`parse_js_epoch_ms` for the exact value.
    """
    ms = parse_js_epoch_ms(text)
    return None if ms is None else _from_epoch_ms(ms)


def to_epoch_ms(moment: datetime) -> int:
    """Aware ``moment`` as JS milliseconds (floored, as ``Date.now()`` is)."""
    if moment.utcoffset() is None:
        raise ValueError("expiry comparisons need an aware datetime")
    return (moment - _EPOCH) // _ONE_MS


def _from_epoch_ms(ms: int) -> datetime:
    lo, hi = to_epoch_ms(_DATETIME_MIN), to_epoch_ms(_DATETIME_MAX)
    return _EPOCH + timedelta(milliseconds=min(max(ms, lo), hi))


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
        return None if self.epoch_ms is None else _from_epoch_ms(self.epoch_ms)

    def is_expired(self, now: datetime) -> bool:
        """``new Date(expiresAt) <= now`` at millisecond precision."""
        return self.epoch_ms is not None and self.epoch_ms <= to_epoch_ms(now)


def read_expiry(expires_at: str | None) -> Expiry:
    """Read an interrupt's optional ``expiresAt`` the way ``@ag-ui/client`` does."""
    if expires_at is None:
        return Expiry(epoch_ms=None, unparseable=False)
    ms = parse_js_epoch_ms(expires_at)
    return Expiry(epoch_ms=ms, unparseable=ms is None)


def is_expired(expires_at: str | None, now: datetime) -> bool:
    """``isInterruptExpired``: False when absent or unparseable, else ``at <= now``.

    ``now`` must be aware; it is floored to milliseconds like ``new Date()``.
    """
    return read_expiry(expires_at).is_expired(now)
