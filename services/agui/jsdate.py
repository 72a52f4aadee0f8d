"""``new Date(s)`` exactly as Node reads it: the port of V8's ``Date`` string parser.

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
"Safari compatible" heuristics (both here), over V8's tokenizer
(``jsdate_scan``), into its composers and ``MakeDay``/``MakeTime``/``TimeClip``
(``jsdate_compose``). The expiry rule itself is ``expiry``.
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

from datetime import UTC, datetime, timedelta

from services.agui.jsdate_compose import Day, State, Time, Zone, time_value
from services.agui.jsdate_scan import (
    END,
    INVALID,
    NONE,
    KeywordType,
    Kind,
    Scanner,
    Token,
    between,
    is_day,
    is_hour,
    is_minute,
    is_month,
    read_milliseconds,
)

__all__ = ["from_epoch_ms", "parse_js_date", "parse_js_epoch_ms", "to_epoch_ms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_DATETIME_MIN = datetime(1, 1, 1, tzinfo=UTC)
_DATETIME_MAX = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)


# ---------------------------------------------------------------------------
# ES5 / ISO fast path (V8 ParseES5DateTime)
# ---------------------------------------------------------------------------


def _parse_es5(st: State) -> Token:
    """Parse as much ISO as possible; return the first token left for legacy.

    Returns ``END`` on a complete ISO parse and ``INVALID`` once a ``T`` has
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
    if not sc.peek().is_keyword(KeywordType.TIME_SEPARATOR):
        if sc.peek().kind is not Kind.END:
            return sc.next()
    elif not _parse_es5_time(st) or not _parse_es5_offset(st) or sc.peek().kind is not Kind.END:
        return INVALID
    if st.zone.is_empty() and st.time.is_empty():
        st.zone.set_hours(0)  # date-only forms are UTC
    st.day.is_iso = True
    return END


def _parse_es5_month_day(st: State) -> Token | None:
    sc = st.scanner
    for valid in (is_month, is_day):
        if not sc.skip_symbol("-"):
            return None
        if not (sc.peek().is_number(2) and valid(sc.peek().value)):
            return sc.next()
        st.day.add(sc.next().value)
    return None


def _parse_es5_time(st: State) -> bool:
    """``T`` HH:mm[:ss[.fraction]]; 24 only as 24:00[:00[.0…]]."""
    sc = st.scanner
    sc.next()  # the 'T'
    if not (sc.peek().is_number(2) and between(sc.peek().value, 0, 24)):
        return False
    hour_is_24 = sc.peek().value == 24
    st.time.add(sc.next().value)

    def two_digit_field() -> bool:
        token = sc.peek()
        if not (token.is_number(2) and is_minute(token.value)) or (hour_is_24 and token.value > 0):
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
        st.time.add(read_milliseconds(sc.next()))
    return True


def _parse_es5_offset(st: State) -> bool:
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
        if not (sc.peek().is_number(2) and is_hour(sc.peek().value)):
            return False
        hour = sc.next().value
        if not (sc.skip_symbol(":") and sc.peek().is_number(2)):
            return False
        minute = sc.next().value
    if not (is_hour(hour) and is_minute(minute)):
        return False
    st.zone.hour, st.zone.minute = hour, minute
    return True


# ---------------------------------------------------------------------------
# Legacy heuristics (the loop in V8 DateParser::Parse)
# ---------------------------------------------------------------------------


def _legacy_number(st: State, token: Token) -> bool:
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
        time.add_final(read_milliseconds(sc.next()))
        return True
    if st.zone.is_expecting(n):
        st.zone.minute = n
        return True
    if time.is_expecting(n):
        time.add_final(n)
        after = sc.peek()  # end, whitespace, Z or a sign must follow
        return after.kind in (Kind.END, Kind.WHITESPACE) or after.is_z() or after.is_sign()
    if not st.day.add(n):
        return False
    sc.skip_symbol("-")
    return True


def _legacy_word(st: State, token: Token, has_read_number: bool) -> bool:
    if token.keyword is KeywordType.AM_PM and not st.time.is_empty():
        st.time.hour_offset = token.value
    elif token.keyword is KeywordType.MONTH_NAME:
        st.day.named_month = token.value
        st.scanner.skip_symbol("-")
    elif token.keyword is KeywordType.TIME_ZONE_NAME and has_read_number:
        st.zone.set_hours(token.value)
    elif has_read_number or st.scanner.peek().is_number():
        return False  # garbage after a number, or glued to the first number
    return True


def _legacy_offset(st: State, token: Token) -> bool:
    """A sign after a time or a UTC zone name: ``GMT+2``, ``+0530``, ``+05:30``."""
    sc, zone = st.scanner, st.zone
    zone.sign = token.sign()
    number = sc.next() if sc.peek().is_number() else Token(Kind.NUMBER, 0, 0)
    if sc.peek().is_symbol(":"):
        zone.hour, zone.minute = number.value, NONE  # minutes follow as a number
    elif number.length in (1, 2):
        zone.hour, zone.minute = number.value, 0
    elif number.length in (3, 4):
        zone.hour, zone.minute = divmod(number.value, 100)
    else:
        return False
    return True


def _parse_legacy(st: State, token: Token) -> bool:
    has_read_number = bool(st.day.comps)
    while token.kind is not Kind.END:
        ok = True
        if token.kind is Kind.NUMBER:
            has_read_number = True
            ok = _legacy_number(st, token)
        elif token.kind is Kind.WORD:
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
# Public API
# ---------------------------------------------------------------------------


def parse_js_epoch_ms(text: str) -> int | None:
    """``new Date(text).getTime()`` under TZ=UTC, or None for Invalid Date."""
    st = State(Scanner(text), Day(), Time(), Zone())
    leftover = _parse_es5(st)
    if leftover.kind is Kind.INVALID or not _parse_legacy(st, leftover):
        return None
    ymd = st.day.write()
    ms_of_day = st.time.write() if ymd is not None else None
    zone_ok, offset_s = st.zone.write()
    if ymd is None or ms_of_day is None or not zone_ok:
        return None
    return time_value(ymd, ms_of_day, offset_s)


def parse_js_date(text: str) -> datetime | None:
    """``new Date(text)`` as an aware UTC datetime (ms precision), or None.

    None means V8 yields Invalid Date. Valid instants before year 1 or after
    year 9999 (which JS supports but ``datetime`` does not) are clamped to
    0001-01-01T00:00:00.000Z / 9999-12-31T23:59:59.999Z; use
    :func:`parse_js_epoch_ms` for the exact value.
    """
    ms = parse_js_epoch_ms(text)
    return None if ms is None else from_epoch_ms(ms)


def to_epoch_ms(moment: datetime) -> int:
    """Aware ``moment`` as JS milliseconds (floored, as ``Date.now()`` is)."""
    if moment.utcoffset() is None:
        raise ValueError("expiry comparisons need an aware datetime")
    return (moment - _EPOCH) // _ONE_MS


def from_epoch_ms(ms: int) -> datetime:
    """A JS time value as an aware UTC datetime, clamped to ``datetime``'s range."""
    lo, hi = to_epoch_ms(_DATETIME_MIN), to_epoch_ms(_DATETIME_MAX)
    return _EPOCH + timedelta(milliseconds=min(max(ms, lo), hi))
