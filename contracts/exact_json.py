"""JSON parsed without changing a number: integers past 64 bits are refused, not rounded.

orjson parses an integer it cannot hold in 64 bits (below -2^63, or 2^64 and
above) as a float, silently: an upstream agent's
``123456789012345678901234567890`` reached every client as
``1.2345678901234568e+29`` (found by probing), and a client's as much reached
the agent. Such a number is valid JSON, but nothing on the way (orjson
writes no integer past 64 bits either) can carry it unchanged, so an input
with one is refused with a reason instead.

Only a document with a run of 19 or more digits can hold one; only such a
document is read a second time (by the standard library, which keeps
integers whole) to look for it, so ordinary input costs one orjson parse.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

LOWEST = -(2**63)
HIGHEST = 2**64 - 1
"""The integers orjson parses as integers (signed and unsigned 64 bits)."""
_LONG_DIGITS = re.compile(rb"\d{19}")


class IntegerOutOfRange(orjson.JSONDecodeError):
    """An integer orjson would have made a float (a ``JSONDecodeError``: the document is
    refused as invalid JSON would be, by the same handlers)."""

    def __init__(self, literal: str) -> None:
        shown = literal if len(literal) <= 40 else f"{literal[:20]}…({len(literal)} digits)"
        message = (f"integer {shown} is outside the 64-bit range [{LOWEST}, {HIGHEST}] "
                   "and cannot be carried unchanged")
        super().__init__(message, "", 0)
        self.args = (message,)  # not JSONDecodeError's "line 1 column 1": there is no place


def _checked_int(literal: str) -> int:
    if len(literal) > 21:  # past 2^64 in any case (and int() refuses 4,300 digits)
        raise IntegerOutOfRange(literal)
    value = int(literal)
    if not LOWEST <= value <= HIGHEST:
        raise IntegerOutOfRange(literal)
    return value


def loads_exact(data: bytes | str) -> Any:
    """``orjson.loads(data)``, refusing (``IntegerOutOfRange``) an integer it would round."""
    parsed = orjson.loads(data)
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw) is not None:
        try:
            json.loads(raw, parse_int=_checked_int)
        except RecursionError:  # nested deeper than the standard parser goes
            raise orjson.JSONDecodeError("nested too deep to check its integers", "",
                                         0) from None
    return parsed
