"""``ascii_int``: ASCII decimal digits only; ``str.isdigit`` also takes ``²`` and ``٣``."""

from __future__ import annotations

import pytest

from contracts.headers import ascii_int

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "signed", "value"), [
    ("0", False, 0), ("42", False, 42), ("-1", True, -1), ("007", False, 7),
    ("-1", False, None), ("²", False, None), ("٣", False, None), ("1_0", False, None),
    ("+1", True, None), (" 1", False, None), ("", False, None), ("-", True, None),
    (None, False, None), ("\uff11", False, None)])
def test_only_ascii_decimal_digits_are_a_number(text: str | None, signed: bool,
                                                value: int | None) -> None:
    assert ascii_int(text, signed=signed) == value
