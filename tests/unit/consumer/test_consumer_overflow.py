"""A stream that falls behind reads the log and rejoins the fan-out: nothing lost or doubled.

``StreamLag`` alone, then a model of one stream — the fan-out routing a
partition's records, the client draining the buffer whenever it likes, the
log reader reading batches of any size once the buffer is drained, producers
writing ahead of both and repeating records — driven by Hypothesis through
every interleaving it finds: the client always gets each sequence number
once, in order, and the buffer never holds more than its limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.consumer.ordering import Sequencer
from services.consumer.overflow import StreamLag, stalled

pytestmark = pytest.mark.unit


def test_a_stream_falls_behind_at_the_first_record_it_could_not_buffer() -> None:
    lag = StreamLag()
    assert not lag.behind
    lag.fall_behind(40)
    assert (lag.behind, lag.resume_at, lag.routed, lag.switches) == (True, 40, 40, 1)
    lag.note(45)
    lag.note(43)  # never goes back
    assert lag.routed == 45


def test_it_rejoins_once_the_reader_is_past_everything_the_fan_out_routed() -> None:
    lag = StreamLag()
    lag.fall_behind(10)
    lag.note(20)
    assert not lag.read_to(15)
    assert lag.behind
    assert lag.resume_at == 15
    assert not lag.read_to(20)  # the record at 20 is not read yet
    assert lag.read_to(21)
    assert not lag.behind
    lag.fall_behind(30)  # and may fall behind again
    assert lag.switches == 2
    assert lag.resume_at == 30


def test_the_reader_position_never_goes_back() -> None:
    lag = StreamLag()
    lag.fall_behind(10)
    lag.note(50)
    assert not lag.read_to(30)
    assert not lag.read_to(12)
    assert lag.resume_at == 30


def test_an_idle_run_rejoins_after_the_first_read() -> None:
    lag = StreamLag()
    lag.fall_behind(7)
    assert lag.read_to(8)


@pytest.mark.parametrize("call", ["note", "read_to"])
def test_a_live_stream_neither_notes_nor_reads(call: str) -> None:
    with pytest.raises(ValueError, match="stream"):
        getattr(StreamLag(), call)(3)


def test_a_stream_behind_does_not_fall_behind_again() -> None:
    lag = StreamLag()
    lag.fall_behind(1)
    with pytest.raises(ValueError, match="behind already"):
        lag.fall_behind(2)


@pytest.mark.parametrize(("before", "now", "verdict"),
                         [(100, 100, True), (100, 150, True), (100, 99, False), (0, 0, True)])
def test_a_paused_connection_stalled_unless_its_unsent_bytes_went_down(
        before: int, now: int, verdict: bool) -> None:
    assert stalled(before, now) is verdict


# ------------------------------------------------------------------ the model


@dataclass
class Record:
    offset: int
    ours: bool
    seq: int


@dataclass
class Model:
    """One stream over one partition, as ``streams``, ``sse`` and ``log_tail`` drive it."""

    log: list[Record]
    limit: int
    written: int = 0
    routed: int = 0
    buffer: list[Record] = field(default_factory=list)
    lag: StreamLag = field(default_factory=StreamLag)
    sequencer: Sequencer[Record] = field(default_factory=Sequencer)
    reader: int | None = None
    delivered: list[int] = field(default_factory=list)
    peak: int = 0

    def write(self, n: int) -> None:
        self.written = min(len(self.log), self.written + n)

    def route(self, n: int) -> None:
        """The fan-out routes up to ``n`` written records (``RunStream.push``)."""
        for record in self.log[self.routed:min(self.written, self.routed + n)]:
            self.routed += 1
            if not record.ours:
                continue
            if self.lag.behind:
                self.lag.note(record.offset)
            elif len(self.buffer) < self.limit:
                self.buffer.append(record)
            else:
                self.lag.fall_behind(record.offset)
            self.peak = max(self.peak, len(self.buffer))

    def drain(self) -> None:
        """The client takes what is buffered (``run_body``)."""
        for record in self.buffer:
            self.deliver(record)
        self.buffer.clear()

    def read(self, n: int) -> None:
        """The log reader reads up to ``n`` written records (only once the buffer is empty)."""
        if not self.lag.behind or self.buffer:
            return
        start = self.lag.resume_at if self.reader is None else self.reader
        batch = self.log[start:min(self.written, start + n)]
        for record in batch:
            if record.ours:
                self.deliver(record)
        self.reader = start + len(batch)
        if self.lag.read_to(self.reader):
            self.reader = None

    def deliver(self, record: Record) -> None:
        self.delivered += [seq for seq, _ in self.sequencer.offer(record.seq, record)]


def partition(ours: list[bool], repeats: list[int]) -> list[Record]:
    """Records of the stream's run (seq 0, 1, ...) among others; ``repeats`` are indexes of
    the run's records written twice (an at-least-once writer), right after themselves."""
    records: list[Record] = []
    seq = 0
    for mine in ours:
        records.append(Record(len(records), mine, seq if mine else -1))
        if mine:
            if seq in repeats:
                records.append(Record(len(records), True, seq))
            seq += 1
    return records


steps = st.lists(st.tuples(st.sampled_from(["write", "route", "drain", "read"]),
                           st.integers(min_value=0, max_value=12)), max_size=200)


@settings(max_examples=400, deadline=None)
@given(ours=st.lists(st.booleans(), min_size=1, max_size=120),
       repeats=st.lists(st.integers(min_value=0, max_value=60), max_size=5),
       limit=st.integers(min_value=1, max_value=6), script=steps)
def test_every_interleaving_delivers_each_event_once_in_order(
        ours: list[bool], repeats: list[int], limit: int,
        script: list[tuple[str, int]]) -> None:
    model = Model(partition(ours, repeats), limit)
    for step, n in script:
        getattr(model, step)(n) if step != "drain" else model.drain()
    # then everything is written and the client reads to the end
    model.write(len(model.log))
    for _ in range(len(model.log) + 2):
        model.route(len(model.log))
        model.drain()
        model.read(len(model.log))
    assert model.delivered == list(range(sum(ours)))
    assert model.peak <= limit
    assert not model.lag.behind


def test_a_client_that_keeps_up_never_reads_the_log() -> None:
    model = Model(partition([True] * 50, []), 4)
    for _ in range(50):
        model.write(1)
        model.route(1)
        model.drain()
    assert model.delivered == list(range(50))
    assert model.lag.switches == 0
