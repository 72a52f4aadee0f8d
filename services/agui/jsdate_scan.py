"""The V8 ``Date`` string tokenizer: what ``new Date(s)`` sees in ``s``.

Part of the port of V8's ``DateParser`` (``jsdate`` says why the port
exists and what it is pinned to): V8's ``InputReader`` and
``DateStringTokenizer``, reading UTF-16 code units exactly as V8 does —
numbers keep 9 significant digits after skipping leading zeros, words are
looked up by their lower-cased 3-letter prefix in V8's keyword table,
parenthesised runs are skipped, a NUL ends the input — and the range
predicates V8's composers share. Pure: stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# ---------------------------------------------------------------------------
# Constants mirrored from V8
# ---------------------------------------------------------------------------

_MAX_SIGNIFICANT_DIGITS = 9  # V8 keeps 9 significant digits of a numeral.
NONE = 2**31 - 1  # V8's kNone ("missing") sentinel (kMaxInt).

# ECMAScript WhiteSpace (V8 IsWhiteSpace) as UTF-16 code units. U+0085 and
# U+180E are not in it. V8 never lets these start or continue a word.
_WHITESPACE = frozenset(
    [0x09, 0x0B, 0x0C, 0x20, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000, 0xFEFF]
)
# ...and LineTerminator. U+2028/U+2029 are ">= 'A'", so V8 reads them as word
# characters (garbage after a number); only \n and \r act as whitespace.
_LINE_TERMINATORS = frozenset([0x0A, 0x0D, 0x2028, 0x2029])


_SYMBOLS = frozenset(map(ord, ":-+.)"))  # V8 returns these as symbol tokens


class Kind(Enum):
    NUMBER = "number"
    SYMBOL = "symbol"  # one of : - + . )
    WORD = "word"  # a keyword-table lookup result, see KeywordType
    WHITESPACE = "whitespace"
    UNKNOWN = "unknown"  # any other character, or a (parenthesised) run
    END = "end"
    INVALID = "invalid"  # terminal failure signalled by the ES5 parser


class KeywordType(Enum):
    GARBAGE = "garbage"  # V8's INVALID keyword type: a word not in the table
    MONTH_NAME = "month"
    TIME_ZONE_NAME = "zone"
    TIME_SEPARATOR = "T"
    AM_PM = "ampm"


# V8 KeywordTable: 3-letter lower-case prefix -> (type, value). Only month
# names may be longer than their prefix ("November", "Marchxyz").
_KEYWORDS: dict[str, tuple[KeywordType, int]] = {
    **{
        name: (KeywordType.MONTH_NAME, index + 1)
        for index, name in enumerate(
            ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        )
    },
    "am": (KeywordType.AM_PM, 0),
    "pm": (KeywordType.AM_PM, 12),
    "ut": (KeywordType.TIME_ZONE_NAME, 0),
    "utc": (KeywordType.TIME_ZONE_NAME, 0),
    "z": (KeywordType.TIME_ZONE_NAME, 0),
    "gmt": (KeywordType.TIME_ZONE_NAME, 0),
    "cdt": (KeywordType.TIME_ZONE_NAME, -5),
    "cst": (KeywordType.TIME_ZONE_NAME, -6),
    "edt": (KeywordType.TIME_ZONE_NAME, -4),
    "est": (KeywordType.TIME_ZONE_NAME, -5),
    "mdt": (KeywordType.TIME_ZONE_NAME, -6),
    "mst": (KeywordType.TIME_ZONE_NAME, -7),
    "pdt": (KeywordType.TIME_ZONE_NAME, -7),
    "pst": (KeywordType.TIME_ZONE_NAME, -8),
    "t": (KeywordType.TIME_SEPARATOR, 0),
}


def between(x: int, lo: int, hi: int) -> bool:
    return lo <= x <= hi


def is_month(x: int) -> bool:
    return between(x, 1, 12)


def is_day(x: int) -> bool:
    return between(x, 1, 31)


def is_hour(x: int) -> bool:
    return between(x, 0, 23)


def is_minute(x: int) -> bool:  # also V8's IsSecond
    return between(x, 0, 59)


# ---------------------------------------------------------------------------
# Tokenizer (V8 InputReader + DateStringTokenizer)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: Kind
    value: int = 0  # number value, symbol code point, or keyword value
    length: int = 0  # characters consumed (numbers count leading zeros)
    keyword: KeywordType | None = None

    def is_number(self, length: int | None = None) -> bool:
        return self.kind is Kind.NUMBER and (length is None or self.length == length)

    def is_symbol(self, char: str) -> bool:
        return self.kind is Kind.SYMBOL and self.value == ord(char)

    def is_sign(self) -> bool:
        return self.is_symbol("+") or self.is_symbol("-")

    def sign(self) -> int:
        return 1 if self.is_symbol("+") else -1

    def is_keyword(self, keyword: KeywordType) -> bool:
        return self.kind is Kind.WORD and self.keyword is keyword

    def is_z(self) -> bool:
        """V8 IsKeywordZ: a one-letter UTC zone name, i.e. ``Z``/``z``."""
        return self.is_keyword(KeywordType.TIME_ZONE_NAME) and self.length == 1


END = Token(Kind.END)
INVALID = Token(Kind.INVALID)


def _utf16_units(text: str) -> list[int]:
    """Code units as JS sees them, cut at the first NUL (V8 treats 0 as end)."""
    raw = text.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "little") for i in range(0, len(raw), 2)]
    return units[: units.index(0)] if 0 in units else units


class Scanner:
    """One-token-lookahead scanner over UTF-16 code units."""

    def __init__(self, text: str) -> None:
        self._units = _utf16_units(text)
        self._pos = 0
        self._next = self._scan()

    def peek(self) -> Token:
        return self._next

    def next(self) -> Token:
        token, self._next = self._next, self._scan()
        return token

    def skip_symbol(self, char: str) -> bool:
        if self._next.is_symbol(char):
            self._next = self._scan()
            return True
        return False

    def _ch(self) -> int:
        return self._units[self._pos] if self._pos < len(self._units) else 0

    def _scan(self) -> Token:
        ch = self._ch()
        if ch == 0:
            return END
        if 0x30 <= ch <= 0x39:
            return self._scan_number()
        if ch in _SYMBOLS:
            self._pos += 1
            return Token(Kind.SYMBOL, ch, 1)
        if ch >= 0x41 and ch not in _WHITESPACE:  # V8: ">= 'A'" is a word char
            return self._scan_word()
        self._pos += 1
        if ch in _WHITESPACE or ch in _LINE_TERMINATORS:
            return Token(Kind.WHITESPACE, 0, 1)
        if ch == 0x28:  # '('
            self._skip_parenthesised()
        return Token(Kind.UNKNOWN, 0, 1)

    def _scan_number(self) -> Token:
        start = self._pos
        while self._ch() == 0x30:  # leading zeros are not significant
            self._pos += 1
        value, digits = 0, 0
        while 0x30 <= self._ch() <= 0x39:
            if digits < _MAX_SIGNIFICANT_DIGITS:
                value = value * 10 + self._ch() - 0x30
            digits += 1
            self._pos += 1
        return Token(Kind.NUMBER, value, self._pos - start)

    def _scan_word(self) -> Token:
        start = self._pos
        while (ch := self._ch()) >= 0x41 and ch not in _WHITESPACE:
            self._pos += 1
        length = self._pos - start
        # V8 lower-cases with "| 0x20" and only compares a 3-unit prefix.
        prefix = "".join(chr(u | 0x20) for u in self._units[start : start + min(length, 3)])
        kind, value = _KEYWORDS.get(prefix, (KeywordType.GARBAGE, 0))
        if length > 3 and kind is not KeywordType.MONTH_NAME:
            kind, value = KeywordType.GARBAGE, 0
        return Token(Kind.WORD, value, length, kind)

    def _skip_parenthesised(self) -> None:
        depth = 1  # the '(' itself was consumed by the caller
        while depth > 0 and (ch := self._ch()) != 0:
            depth += 1 if ch == 0x28 else -1 if ch == 0x29 else 0
            self._pos += 1


def read_milliseconds(token: Token) -> int:
    """V8 ReadMilliseconds: scale a fraction numeral to three digits."""
    number, length = token.value, token.length
    if length < 3:
        return number * (100 if length == 1 else 10)
    # Only 9 significant digits were kept, but the divisor is capped too, so a
    # fraction longer than 9 digits with leading zeros reads too large (V8 quirk).
    divisor: int = 10 ** (min(length, _MAX_SIGNIFICANT_DIGITS) - 3)
    return number // divisor
