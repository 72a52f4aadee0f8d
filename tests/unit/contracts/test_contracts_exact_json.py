"""``loads_exact``: orjson's answer, except for integers it would have rounded to floats."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.exact_json import HIGHEST, LOWEST, IntegerOutOfRange, loads_exact

pytestmark = pytest.mark.unit

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(LOWEST, HIGHEST)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


@given(JSON)
def test_what_orjson_reads_exactly_is_read_the_same(doc: object) -> None:
    raw = orjson.dumps(doc)
    assert loads_exact(raw) == orjson.loads(raw)


@given(st.integers(min_value=HIGHEST + 1) | st.integers(max_value=LOWEST - 1))
def test_every_integer_past_64_bits_is_refused(n: int) -> None:
    with pytest.raises(IntegerOutOfRange, match="outside the 64-bit range"):
        loads_exact(f'{{"a": [1, {n}]}}'.encode())


def test_long_digit_runs_in_strings_and_fractions_are_no_integers() -> None:
    doc = b'{"id": "123456789012345678901234567890", "x": 12345678901234567890123.5}'
    assert loads_exact(doc) == orjson.loads(doc)


def test_a_refusal_is_a_json_decode_error_naming_the_number() -> None:
    with pytest.raises(orjson.JSONDecodeError) as err:
        loads_exact(b"[" + b"7" * 300 + b"]")  # a double orjson would have made of it
    assert "digits" in str(err.value)
    assert "line 1" not in str(err.value)
