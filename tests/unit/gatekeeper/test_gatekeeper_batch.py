"""One partition's batch: records in, decisions, dispatches, dead letters and states out."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import pytest
from ag_ui.core import (
    PROTOCOL_VERSION,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
)
from gatekeeper_builders import ENQUEUE, ENTROPY, NOW, REJECT, interrupt, request, resolve, running

from contracts import EventHeaders, ThreadState, TopicCatalog, encode, encode_event
from services.gatekeeper.batch import Batch, Limits
from services.gatekeeper.partition import outputs
from services.gatekeeper.rules import Policy
from services.kafka.deadletters import DEAD_LETTER_VALUE_LIMIT, dead_letter
from services.kafka.sizing import RecordLimit, record_size
from services.kafka.transactions import OutRecord

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Rec:
    topic: str
    value: bytes | None
    key: bytes | None = b"t1"
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int = 3
    offset: int = 42


def batch(committed: dict[str, ThreadState] | None = None, policy: Policy = REJECT) -> Batch:
    return Batch(
        committed or {}, NOW, policy, Limits(RecordLimit(8192), agents=frozenset({"scripted"})),
        entropy=ENTROPY,
    )


def fits(record: OutRecord, limit: int = 8192) -> bool:
    """True when the broker would take ``record`` under ``limit`` (key and headers too)."""
    return record_size(record.key, record.value, record.headers) <= limit


def req(*args: object, **kwargs: object) -> Rec:
    return Rec("p.requests", encode(request(*args, **kwargs)))  # type: ignore[arg-type]


def ev(run_id: str, kind: str, value: bytes | None, *, key: bytes | None = b"t1") -> Rec:
    return Rec("p.events", value, key, EventHeaders(run_id, kind, "scripted", 5).encode())


ERROR = encode_event(RunErrorEvent(message="boom"))
"""A RUN_ERROR's value, as a worker writes it."""


def interrupting(run_id: str, *ids: str) -> Rec:
    event = RunFinishedEvent(
        thread_id="t1",
        run_id=run_id,
        outcome=RunFinishedInterruptOutcome(interrupts=[interrupt(i) for i in ids]),
    )
    return ev(run_id, "RUN_FINISHED", encode_event(event))


def test_an_interrupt_then_a_full_resume_in_one_batch_is_admitted() -> None:
    b = batch({"t1": running("r0")})
    b.event(interrupting("r0", "a", "b"))
    b.request(req("q1", "r1", resume=resolve("a", "b")))
    assert [(d.request_id, d.verdict) for d in b.decisions] == [("q1", "admitted")]
    assert [d.input.run_id for d in b.dispatches] == ["r1"]
    assert b.states["t1"].status == "running"
    assert b.states["t1"].run_id == "r1"
    assert b.dead_letters == []
    assert b.has_output


def test_committed_states_are_read_not_written() -> None:
    committed = {"t1": running("r0")}
    b = batch(committed)
    b.event(interrupting("r0", "a"))
    assert committed["t1"].status == "running"
    assert b.state("t1").status == "interrupted"
    assert b.state("t9").status == "idle"


def test_other_events_are_skipped_on_their_type_header_without_decoding() -> None:
    b = batch({"t1": running("r0")})
    b.event(ev("r0", "TEXT_MESSAGE_CONTENT", b"not even json"))
    b.event(Rec("p.events", b"{}", headers=[]))
    assert not b.has_output
    assert b.states == {}


def test_a_run_error_closes_the_run_it_names() -> None:
    b = batch({"t1": running("r0")})
    b.event(ev("r0", "RUN_ERROR", encode_event(RunErrorEvent(message="x"))))
    assert b.states["t1"].status == "idle"
    assert b.dead_letters == []


def test_what_a_worker_and_its_recovery_write_on_runs_is_used_and_never_dead_lettered() -> None:
    """A run, its late RUN_ERROR, and recovery's ``worker_lost`` start and end (as
    ``services.producer.recovery`` builds them) all pass the boundary checks."""
    b = batch()
    started = RunStartedEvent(thread_id="t1", run_id="r0", protocol_version=PROTOCOL_VERSION)
    b.event(ev("r0", "RUN_STARTED", encode_event(started)))
    b.event(ev("r0", "RUN_FINISHED", encode_event(RunFinishedEvent(thread_id="t1", run_id="r0"))))
    late = RunErrorEvent(message="worker lost", code="worker_lost")
    b.event(ev("r0", "RUN_ERROR", encode_event(late)))
    b.event(ev("r1", "RUN_STARTED", encode_event(started.model_copy(update={"run_id": "r1"}))))
    b.event(ev("r1", "RUN_ERROR", encode_event(late)))
    assert b.dead_letters == []
    assert b.states["t1"].status == "idle"
    assert b.states["t1"].recent_run_ids == ["r0", "r1"]


def started_as(thread_id: str, run_id: str) -> bytes:
    return encode_event(RunStartedEvent(thread_id=thread_id, run_id=run_id))


@pytest.mark.parametrize(
    ("kind", "value", "why"),
    [
        ("RUN_STARTED", b"not json", "not JSON"),
        ("RUN_STARTED", b"\xff\xfe\x80{", "not JSON"),
        ("RUN_STARTED", None, "not JSON"),
        ("RUN_STARTED", b"[1]", "not a RUN_STARTED event"),
        ("RUN_STARTED", b'{"threadId":"t1","runId":"r5"}', "not a RUN_STARTED event"),
        ("RUN_STARTED", b'{"type":"RUN_STARTED","threadId":"t1"}', "does not validate"),
        ("RUN_STARTED", started_as("t1other", "r5"), "names thread 't1other' but is keyed 't1'"),
        ("RUN_STARTED", started_as("t1", "r6"), "names run 'r6' but its agui-run-id header"),
        ("RUN_ERROR", b"not json", "not JSON"),
        ("RUN_ERROR", b'{"type":"RUN_ERROR"}', "does not validate"),
        ("RUN_ERROR", b'{"type":"RUN_ERROR","message":"x","threadId":"t2"}', "names thread"),
        ("RUN_ERROR", b'{"type":"RUN_ERROR","message":"x","runId":"r0"}', "names run 'r0'"),
        ("RUN_FINISHED", encode_event(RunFinishedEvent(thread_id="t2", run_id="r5")),
         "names thread 't2'"),
        ("RUN_FINISHED", encode_event(RunFinishedEvent(thread_id="t1", run_id="r0")),
         "names run 'r0'"),
    ],
    ids=["start-not-json", "start-not-utf8", "start-tombstone", "start-array", "start-no-type",
         "start-invalid", "start-other-thread", "start-other-run", "error-not-json",
         "error-invalid", "error-other-thread", "error-other-run", "finished-other-thread",
         "finished-other-run"],
)
def test_a_boundary_that_is_not_the_event_its_key_and_headers_name_is_dead_lettered(
        kind: str, value: bytes | None, why: str) -> None:
    """Nothing is adopted, closed or opened on it: an idle thread stays idle (a start
    nobody dispatched would hold it running for ever), a running one stays running."""
    for committed in ({}, {"t1": running("r5")}):
        b = batch(committed)
        b.event(ev("r5", kind, value))  # type: ignore[arg-type]
        assert b.states == {}
        assert b.adopted == []
        assert [d.code for d in b.dead_letters] == ["invalid_event"]
        assert why in b.dead_letters[0].reason, b.dead_letters[0].reason
        assert "the thread stays as it was" in b.dead_letters[0].reason


@pytest.mark.parametrize(
    ("record", "code"),
    [
        (ev("r0", "RUN_FINISHED", b"{broken", key=b"t1"), "invalid_event"),
        (ev("r0", "RUN_FINISHED", b'{"type":"RUN_ERROR","message":"x"}'), "invalid_event"),
        (ev("r0", "RUN_ERROR", b"{}", key=None), "event_without_key"),
        (ev("r0", "RUN_ERROR", b"{}", key=b"\xfft1"), "event_key_not_utf8"),
        (
            Rec("p.events", b"{}", headers=[("agui-event-type", b"RUN_ERROR")]),
            "event_without_headers",
        ),
    ],
    ids=["bad-json", "wrong-type", "no-key", "key-not-utf8", "no-run-header"],
)
def test_an_unusable_boundary_is_dead_lettered_and_the_thread_stays(record: Rec, code: str) -> None:
    b = batch({"t1": running("r0")})
    b.event(record)
    assert b.states == {}
    assert [d.code for d in b.dead_letters] == [code]
    letter = b.dead_letters[0]
    assert (letter.source_topic, letter.partition, letter.offset) == ("p.events", 3, 42)
    assert letter.service == "gatekeeper"
    assert letter.failed_at == NOW
    assert letter.reason


def test_an_unreadable_request_is_a_dead_letter_keeping_the_raw_record() -> None:
    b = batch()
    b.request(Rec("p.requests", b"\xff\xfeoops", b"t1", [("traceparent", b"00-ab")]))
    (letter,) = b.dead_letters
    assert letter.value_encoding == "base64"
    assert base64.b64decode(letter.value) == b"\xff\xfeoops"
    assert letter.headers == {"traceparent": "00-ab"}
    assert letter.key == "t1"
    assert b.decisions == []
    assert b.states == {}


def test_a_refused_request_is_decided_without_touching_any_thread() -> None:
    b = batch()
    b.request(req("q1", "r1", agent="nobody"))
    b.request(Rec("p.requests", encode(request("q2", "r2")), key=b"t2"))
    assert [d.code for d in b.decisions] == ["invalid_input", "key_mismatch"]
    assert b.states == {}
    assert b.dispatches == []


def test_a_retry_writes_its_decision_again_but_no_state() -> None:
    first = batch()
    first.request(req("q1", "r1"))
    again = batch(dict(first.states))
    again.request(req("q1", "r1"))
    assert again.decisions == [d.model_copy(update={"replayed": True}) for d in first.decisions]
    assert again.states == {}
    assert again.dispatches == []


def test_a_closing_boundary_decides_the_queued_requests() -> None:
    b = batch({"t1": running("r0")}, ENQUEUE)
    b.request(req("q1", "r1"))
    b.event(ev("r0", "RUN_ERROR", ERROR))
    assert [(d.request_id, d.verdict) for d in b.decisions] == [
        ("q1", "queued"),
        ("q1", "admitted"),
    ]
    assert [d.request_id for d in b.dispatches] == ["q1"]


def test_a_huge_dead_letter_is_cut_and_says_so() -> None:
    value = b"x" * (DEAD_LETTER_VALUE_LIMIT + 10)
    letter = dead_letter(Rec("p.requests", value), "oversize", "too big", NOW, service="gatekeeper")
    assert len(letter.value) == DEAD_LETTER_VALUE_LIMIT
    assert f"of {DEAD_LETTER_VALUE_LIMIT + 10} bytes" in letter.reason


def _trace(n: int) -> bytes:
    return f"00-{n:032x}-{n:016x}-01".encode()


def _dispatched(b: Batch) -> list[tuple[bytes | None, str, str, bytes | None]]:
    """Each dispatch record as written: key, the input's threadId and runId, traceparent."""
    out = []
    for record in outputs(TopicCatalog("p", 4), 3, b):
        if record.topic == "p.dispatch.scripted":
            body = orjson.loads(record.value)
            trace = dict(record.headers or []).get("traceparent")
            out.append((record.key, body["input"]["threadId"], body["input"]["runId"], trace))
    return out


def test_one_request_id_on_several_threads_dispatches_each_thread_its_own_run() -> None:
    """requestIds are unique per thread only: five threads may share one in a batch."""
    b = batch()
    for n in range(5):
        thread = f"thread-{n}"
        record = Rec(
            "p.requests",
            encode(request("same-id", f"run-{n}", thread_id=thread)),
            key=thread.encode(),
            headers=[("traceparent", _trace(n + 1))],
        )
        b.request(record)
    assert [(d.thread_id, d.verdict) for d in b.decisions] == [
        (f"thread-{n}", "admitted") for n in range(5)
    ]
    written = _dispatched(b)
    assert [(key, thread, run) for key, thread, run, _ in written] == [
        (f"thread-{n}".encode(), f"thread-{n}", f"run-{n}") for n in range(5)
    ]
    # each dispatch continues its own request's trace
    assert [trace[:36] if trace else None for *_, trace in written] == [
        _trace(n + 1)[:36] for n in range(5)
    ]


def test_a_decisions_span_ids_come_from_the_entropy_the_batch_is_given() -> None:
    """The batch draws no randomness of its own: pinned entropy, pinned trace ids."""
    def pinned(n: int) -> bytes:
        return bytes(range(1, n + 1))

    def traces(entropy: Callable[[int], bytes], incoming: bytes | None) -> list[bytes | None]:
        b = Batch({}, NOW, REJECT, Limits(RecordLimit(8192), agents=frozenset({"scripted"})),
                  entropy=entropy)
        headers = [("traceparent", incoming)] if incoming is not None else []
        b.request(Rec("p.requests", encode(request("q1", "r1")), headers=headers))
        return [trace for *_, trace in _dispatched(b)]

    continued = _trace(7)[:36] + b"0102030405060708" + _trace(7)[52:]
    assert traces(pinned, _trace(7)) == [continued]
    assert traces(pinned, None) == traces(pinned, None)
    [started] = traces(pinned, None)
    assert started is not None
    assert started.startswith(b"00-0102030405060708090a0b0c0d0e0f10-")


def test_a_queued_request_keeps_its_own_input_beside_another_threads_same_request_id() -> None:
    b = batch({"t1": running("r0")}, ENQUEUE)
    queued = Rec(
        "p.requests", encode(request("same-id", "r1")), headers=[("traceparent", _trace(1))]
    )
    b.request(queued)  # queued on t1
    other = Rec(
        "p.requests",
        encode(request("same-id", "r9", thread_id="t2")),
        key=b"t2",
        headers=[("traceparent", _trace(9))],
    )
    b.request(other)  # admitted on t2
    b.event(ev("r0", "RUN_ERROR", ERROR))  # t1's run closes: its queued request is admitted
    assert sorted((key, thread, run) for key, thread, run, _ in _dispatched(b)) == [
        (b"t1", "t1", "r1"),
        (b"t2", "t2", "r9"),
    ]
    traces = {thread: (trace or b"")[:36] for _, thread, _, trace in _dispatched(b)}
    assert traces == {"t1": _trace(1)[:36], "t2": _trace(9)[:36]}


def sized(request_id: str, run_id: str, total: int) -> Rec:
    """A request record of about ``total`` bytes (its user message padded)."""
    r = request(request_id, run_id)
    r.input.messages[0].content = "x" * (total - len(encode(r)))  # type: ignore[union-attr]
    return Rec("p.requests", encode(r))


def test_a_request_whose_dispatch_would_outgrow_a_record_is_rejected_not_written() -> None:
    """Within the request limit, but its dispatch would not fit: a rejection, nothing else."""
    b = batch()
    record = sized("q1", "r1", 8192 - 40)
    assert record.value is not None
    assert len(record.value) <= 8192
    b.request(record)
    [decision] = b.decisions
    assert (decision.verdict, decision.code) == ("rejected", "invalid_input")
    assert "dispatch would be" in decision.message
    assert b.dispatches == []
    assert b.states == {}, "the thread stays as it was: idle, free for a smaller input"
    b.request(sized("q2", "r2", 2000))
    assert [d.verdict for d in b.decisions] == ["rejected", "admitted"]
    assert all(fits(r) for r in outputs(TopicCatalog("p"), 3, b))


def test_a_queued_request_that_would_outgrow_the_thread_state_is_rejected() -> None:
    b = batch({"t1": running("r0")}, Policy(busy="enqueue", queue_limit=8))
    for n in range(1, 5):
        b.request(sized(f"q{n}", f"r{n}", 3000))
    verdicts = [(d.verdict, d.code) for d in b.decisions]
    assert verdicts[:2] == [("queued", None), ("queued", None)]
    assert verdicts[2:] == [("rejected", "invalid_input")] * 2
    assert "thread's state would be" in b.decisions[2].message
    assert len(b.states["t1"].queued) == 2
    assert all(fits(r) for r in outputs(TopicCatalog("p"), 3, b))


def test_written_states_and_dispatches_are_the_encodings_made_while_deciding() -> None:
    b = batch({"t1": running("r0")})
    b.event(interrupting("r0", "a"))
    b.request(req("q1", "r1", resume=resolve("a")))
    records = {r.topic: r.value for r in outputs(TopicCatalog("p"), 3, b)}
    assert records["p.threads"] == encode(b.states["t1"])
    assert records["p.dispatch.scripted"] == b.decided[0].dispatch_value


def test_a_start_no_admission_preceded_on_an_idle_thread_is_adopted_and_reported() -> None:
    b = batch()
    b.event(ev("ghost", "RUN_STARTED", started_as("t1", "ghost")))
    assert (b.states["t1"].status, b.states["t1"].run_id) == ("running", "ghost")
    assert b.adopted == [("t1", "ghost", ("p.events", 3, 42))]
    admitted = batch({"t1": running("r0")})
    admitted.event(ev("r0", "RUN_STARTED", started_as("t1", "r0")))
    assert admitted.adopted == []
