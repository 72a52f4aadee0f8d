"""One partition's batch: records in, decisions, dispatches, dead letters and states out."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pytest
from ag_ui.core import RunErrorEvent, RunFinishedEvent, RunFinishedInterruptOutcome
from gatekeeper_builders import ENQUEUE, NOW, REJECT, interrupt, request, resolve, running

from contracts import EventHeaders, ThreadState, encode, encode_event
from services.gatekeeper.batch import DEAD_LETTER_VALUE_LIMIT, Batch, Limits, dead_letter
from services.gatekeeper.rules import Policy

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
        committed or {}, NOW, policy, Limits(max_bytes=8192, agents=frozenset({"scripted"}))
    )


def req(*args: object, **kwargs: object) -> Rec:
    return Rec("p.requests", encode(request(*args, **kwargs)))  # type: ignore[arg-type]


def ev(run_id: str, kind: str, value: bytes, *, key: bytes | None = b"t1") -> Rec:
    return Rec("p.events", value, key, EventHeaders(run_id, kind, "scripted", 5).encode())


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


def test_run_error_is_read_from_its_headers_alone() -> None:
    b = batch({"t1": running("r0")})
    b.event(ev("r0", "RUN_ERROR", b"\x00 body not needed"))
    assert b.states["t1"].status == "idle"
    b2 = batch({"t1": running("r0")})
    b2.event(ev("r0", "RUN_ERROR", encode_event(RunErrorEvent(message="x"))))
    assert b2.states["t1"].status == "idle"


@pytest.mark.parametrize(
    ("record", "code"),
    [
        (ev("r0", "RUN_FINISHED", b"{broken", key=b"t1"), "invalid_event"),
        (ev("r0", "RUN_FINISHED", b'{"type":"RUN_ERROR","message":"x"}'), "invalid_event"),
        (ev("r0", "RUN_ERROR", b"{}", key=None), "event_without_key"),
        (
            Rec("p.events", b"{}", headers=[("agui-event-type", b"RUN_ERROR")]),
            "event_without_headers",
        ),
    ],
    ids=["bad-json", "wrong-type", "no-key", "no-run-header"],
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
    assert again.decisions == first.decisions
    assert again.states == {}
    assert again.dispatches == []


def test_a_closing_boundary_decides_the_queued_requests() -> None:
    b = batch({"t1": running("r0")}, ENQUEUE)
    b.request(req("q1", "r1"))
    b.event(ev("r0", "RUN_ERROR", b"{}"))
    assert [(d.request_id, d.verdict) for d in b.decisions] == [
        ("q1", "queued"),
        ("q1", "admitted"),
    ]
    assert [d.request_id for d in b.dispatches] == ["q1"]


def test_a_huge_dead_letter_is_cut_and_says_so() -> None:
    value = b"x" * (DEAD_LETTER_VALUE_LIMIT + 10)
    letter = dead_letter(Rec("p.requests", value), "oversize", "too big", NOW)
    assert len(letter.value) == DEAD_LETTER_VALUE_LIMIT
    assert f"of {DEAD_LETTER_VALUE_LIMIT + 10} bytes" in letter.reason
