"""Where a replay with ``Last-Event-ID`` starts reading: the same answer as reading the run.

A model partition — the run's records (a sequence number and a type) between
other threads' records, a seam's repeated and late numbers, the run's terminal
event or none, records written after the scan's end — is searched by ``Seek``
with fetches of any size, then read from where it says; Hypothesis checks that
the replay's answer (its first event, whether the run ended, and what the
stream's ``Sequencer`` delivers) is the one reading from the run's start gives,
for every ``Last-Event-ID`` (ids the run never had included), and that the
search reads a few fetches, not the run.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.consumer.ordering import Sequencer
from services.consumer.replay import first_after
from services.consumer.seek import SEAM, OffsetSearch, Seek
from services.consumer.streams import Delivery

pytestmark = pytest.mark.unit

Entry = tuple[int, str] | None
"""One offset of the partition: a record of the run (number, type), or another's."""


@dataclass
class Partition:
    entries: list[Entry]
    base: int
    end: int


def deliveries(part: Partition, start: int) -> list[Delivery]:
    """The run's records from ``start`` to the scan's end, as ``scan_run`` yields them."""
    return [Delivery(e[0], e[1], b"", offset)
            for offset, e in enumerate(part.entries[start:part.end], start) if e is not None]


async def items(records: list[Delivery]) -> AsyncIterator[Delivery | None]:
    for record in records:
        yield record


def answer(records: list[Delivery], after: int) -> tuple[int | None, bool, list[int]]:
    """What the replay route makes of a scan: the offset of its first event, whether the
    run ended with nothing to send, and the offsets the stream's sequencer delivers."""
    scan = items(records)
    first, ended = asyncio.run(first_after(scan, after))
    if first is None:
        return None, ended, []
    rest = records[records.index(first):]
    sequencer: Sequencer[Delivery] = Sequencer(after=after)
    out = [d.offset for r in rest for _, d in sequencer.offer(r.seq, r)]
    return first.offset, False, out + [d.offset for _, d in sequencer.release()]


def search(part: Partition, after: int, fetch: int, seam: int = SEAM) -> tuple[int, int]:
    """``Seek`` over the model partition: where it starts and how many records it read."""
    seek = Seek(part.base, part.end, after, seam)
    read = probes = 0
    while (offset := seek.probe()) is not None:
        probes += 1
        assert probes <= 4 * len(part.entries) + 64, "the search does not end"
        got = part.entries[offset:offset + fetch]
        read += len(got)
        seek.saw([(o, e[0]) for o, e in enumerate(got, offset) if e is not None],
                 offset + len(got))
    assert part.base <= seek.start <= part.end
    return seek.start, read


@st.composite
def partitions(draw: st.DrawFn, seam: int) -> Partition:
    """A run whose numbers rise with the offsets but for a seam's repeats (never more than
    ``seam`` below a number written before) and lost numbers, with its terminal event or
    not (and then nothing more than ``seam`` above it), maybe a late ``RUN_ERROR``."""
    moves = draw(st.lists(st.integers(-seam, 3), max_size=40))
    seqs, top = [], -1
    for move in moves:
        seq = max(0, top + 1 if move > 0 and top < 0 else top + move)
        seqs.append(seq)
        top = max(top, seq)
    types = ["TEXT_MESSAGE_CONTENT"] * len(seqs)
    if seqs and draw(st.booleans()):
        at = draw(st.integers(0, len(seqs) - 1))
        types[at] = "RUN_FINISHED"
        seqs[at + 1:] = [min(s, seqs[at] + seam) for s in seqs[at + 1:]]
        if at + 1 < len(seqs) and draw(st.booleans()):
            types[draw(st.integers(at + 1, len(seqs) - 1))] = "RUN_ERROR"
    entries: list[Entry] = [None] * draw(st.integers(0, 4))
    base = len(entries)
    for seq, kind in zip(seqs, types, strict=True):
        entries += [None] * draw(st.integers(0, 3)) + [(seq, kind)]
    entries += [None] * draw(st.integers(0, 3))
    end = len(entries)
    entries += [(top + 1 + i, "TEXT_MESSAGE_CONTENT") for i in range(draw(st.integers(0, 3)))]
    return Partition(entries, base, end)


@settings(max_examples=800, deadline=None)
@given(st.integers(0, 4).flatmap(lambda seam: st.tuples(
    st.just(seam), partitions(seam), st.integers(-1, 60), st.integers(1, 7))))
def test_reading_from_where_the_search_ends_answers_as_reading_the_whole_run(
        case: tuple[int, Partition, int, int]) -> None:
    seam, part, after, fetch = case
    start, _ = search(part, after, fetch, seam)
    assert answer(deliveries(part, start), after) == answer(deliveries(part, part.base), after)


@settings(max_examples=800, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 8)), max_size=40).map(
    lambda raw: [None if x is None else x for x in raw]), st.integers(0, 9),
    st.integers(1, 5), st.data())
def test_the_search_finds_the_lowest_offset_whose_next_record_reaches_the_target(
        raw: list[int | None], target: int, fetch: int, data: st.DataObject) -> None:
    numbers = iter(sorted(x for x in raw if x is not None))  # rising with the offsets
    entries = [None if x is None else next(numbers) for x in raw]

    def reaches(o: int) -> bool:
        following = [e for e in entries[o:] if e is not None]
        return not following or following[0] >= target

    lo = data.draw(st.integers(0, len(entries)))
    hi = data.draw(st.sampled_from([o for o in range(lo, len(entries) + 1) if reaches(o)]))
    expected = next(o for o in range(lo, hi + 1) if reaches(o))
    found = OffsetSearch(lo, hi, target)
    while (offset := found.probe()) is not None:
        got = entries[offset:offset + fetch]
        found.saw([(o, e) for o, e in enumerate(got, offset) if e is not None],
                  offset + len(got))
    # the lowest such offset, or one past other threads' records just before it
    assert found.hi >= expected
    assert all(e is None for e in entries[expected:found.hi])


def dense(n: int, *, finished: bool = True) -> Partition:
    """A run of ``n`` records alone on its partition, ending with its terminal event."""
    entries: list[Entry] = [(i, "TEXT_MESSAGE_CONTENT") for i in range(n)]
    if finished:
        entries[-1] = (n - 1, "RUN_FINISHED")
    return Partition(entries, 0, n)


@pytest.mark.parametrize("after", [0, SEAM, 5_000, 99_000, 99_990, 99_999, 100_003, 10**9])
def test_a_long_run_is_searched_in_a_few_fetches(after: int) -> None:
    part = dense(100_000)
    start, read = search(part, after, fetch=64)
    assert read <= 64 * 6 * math.log2(100_000), read
    assert start >= min(after, 99_999) - 2 * SEAM
    assert answer(deliveries(part, start), after) == answer(deliveries(part, 0), after)


def test_at_the_end_of_a_finished_run_the_terminal_event_is_read() -> None:
    part = dense(1_000)
    for after in (999, 1_000, 5_000):
        start, _ = search(part, after, fetch=64)
        assert 999 - 2 * SEAM <= start <= 999
        assert answer(deliveries(part, start), after) == (None, True, [])


def test_a_live_run_with_nothing_past_the_id_has_not_ended() -> None:
    part = dense(1_000, finished=False)
    start, _ = search(part, 999, fetch=64)
    assert start >= 999 - 2 * SEAM
    assert answer(deliveries(part, start), 999) == (None, False, [])


def test_a_partition_without_the_run_is_not_read_again() -> None:
    part = Partition([None] * 500, 0, 500)
    start, read = search(part, 10_000, fetch=64)
    assert start == 500  # nothing to read after the search
    assert read <= 500 + 64 * math.log2(500)  # a fetch past each probe's bound at most


def test_a_client_near_the_runs_start_reads_it_from_its_start_without_a_search() -> None:
    assert search(dense(10_000), SEAM - 1, fetch=64) == (0, 0)


def test_a_terminal_event_followed_by_a_seams_dip_and_rise_is_read() -> None:
    seam = 2
    seqs = [*range(11), 8, 12]  # RUN_FINISHED at 10, then a stale 8 and a late 12
    part = Partition([(s, "RUN_FINISHED" if i == 10 else "TEXT_MESSAGE_CONTENT")
                      for i, s in enumerate(seqs)], 0, len(seqs))
    for fetch in (1, 2, 3):
        for after in (12, 13, 40):
            start, _ = search(part, after, fetch, seam)
            assert answer(deliveries(part, start), after) == (None, True, [])


def test_a_seams_repeated_numbers_are_read_as_before() -> None:
    seqs = [*range(50), *range(47, 60)]  # a takeover rewrote 47..49
    part = Partition([(s, "TEXT_MESSAGE_CONTENT") for s in seqs], 0, len(seqs))
    for after in (46, 48, 49, 52):
        start, _ = search(part, after, fetch=4)
        assert answer(deliveries(part, start), after) == answer(deliveries(part, 0), after)
