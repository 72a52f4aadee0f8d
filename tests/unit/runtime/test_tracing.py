"""``traceparent`` parsing and hops follow the W3C Trace Context recommendation."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.runtime.tracing import (
    Entropy,
    TraceParent,
    current,
    next_hop,
    next_hop_bytes,
    parse,
    start,
    within,
)

pytestmark = pytest.mark.unit

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEX = "0123456789abcdef"


def counting(seed: int = 1) -> Entropy:
    """Deterministic entropy: bytes seed, seed+1, ... (never all zero)."""
    counter = itertools.count(seed)

    def entropy(n: int) -> bytes:
        return bytes((next(counter) % 255) + 1 for _ in range(n))

    return entropy


def test_the_recommendation_example_parses() -> None:
    assert parse(VALID) == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1)
    assert parse(VALID.encode()) == parse(VALID)
    assert parse(VALID).header() == VALID  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [
    None, "", "00", VALID.upper(), VALID[:-1], VALID + "-", VALID + "-extra",
    "ff" + VALID[2:],  # version ff is forbidden
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
    "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  # misplaced dash
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
    "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    b"\xff\xfe", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bg-01",
])
def test_invalid_headers_are_refused(value: str | bytes | None) -> None:
    assert parse(value) is None


def test_a_later_version_is_read_by_its_first_four_fields() -> None:
    later = "cc" + VALID[2:] + "-what-the-future-adds"
    assert parse(later) == parse(VALID)
    assert parse("cc" + VALID[2:]) == parse(VALID)
    assert parse("cc" + VALID[2:] + "x") is None  # a longer value must continue with a dash


def test_flags_are_kept_and_written_back() -> None:
    unsampled = VALID[:-2] + "00"
    parent = parse(unsampled)
    assert parent is not None
    assert parent.flags == 0
    assert next_hop(unsampled, counting()).header().endswith("-00")


def test_a_hop_keeps_the_trace_and_takes_a_new_span() -> None:
    hop = next_hop(VALID, counting())
    assert hop.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert hop.span_id != "00f067aa0ba902b7"
    assert parse(hop.header()) == hop


def test_no_or_an_invalid_parent_starts_a_new_sampled_trace() -> None:
    for incoming in (None, "garbage", b"00-zz"):
        hop = next_hop(incoming, counting(7))
        assert hop == start(counting(7))
        assert hop.flags == 1
        assert parse(hop.header()) == hop


def test_all_zero_entropy_is_drawn_again() -> None:
    draws = iter([bytes(16), b"\x01" * 16, bytes(8), b"\x02" * 8])
    trace = start(lambda n: next(draws))
    assert trace.trace_id == "01" * 16
    assert trace.span_id == "02" * 8
    assert parse(trace.header()) == trace


def test_bytes_hops_match_text_hops() -> None:
    assert next_hop_bytes(VALID.encode(), counting()) == next_hop(VALID, counting()).header(
    ).encode()


@given(st.text(HEX, min_size=32, max_size=32), st.text(HEX, min_size=16, max_size=16),
       st.integers(0, 255))
def test_every_well_formed_header_round_trips(trace_id: str, span_id: str, flags: int) -> None:
    value = f"00-{trace_id}-{span_id}-{flags:02x}"
    parsed = parse(value)
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        assert parsed is None
    else:
        assert parsed == TraceParent(trace_id, span_id, flags)
        assert parsed.header() == value
        assert parsed.child().trace_id == trace_id


@given(st.text(max_size=80))
def test_parsing_anything_never_raises(value: str) -> None:
    parsed = parse(value)
    assert parsed is None or parse(parsed.header()) == parsed


async def test_the_current_hop_reaches_the_tasks_a_run_starts_and_no_others() -> None:
    hop = start(counting(3))
    other = start(counting(9))
    assert current() is None

    async def child_sees() -> TraceParent | None:
        await asyncio.sleep(0)
        return current()

    with within(hop):
        inside = asyncio.create_task(child_sees())
        with within(other):
            assert current() == other
        assert current() == hop
    outside = asyncio.create_task(child_sees())
    assert await inside == hop
    assert await outside is None
    assert current() is None
