"""A batch writes nothing the broker would refuse: every output is measured as decided.

Record limit 8,192 bytes here (the rules are the same at 1 MiB): decisions,
dispatches and thread states are measured with their key and headers, a
decision that cannot fit dead-letters its request, a boundary whose state
cannot fit closes its run as failed, dead letters are cut to fit, and inputs
the broker refused anyway (``poison``) are dead-lettered when read again.
"""

from __future__ import annotations

import orjson
import pytest
from ag_ui.core import RunFinishedEvent, RunFinishedInterruptOutcome
from gatekeeper_builders import ENQUEUE, ENTROPY, NOW, REJECT, interrupt, request, running
from test_gatekeeper_batch import ERROR, Rec, ev, fits, req

from contracts import DeadLetter, ThreadState, TopicCatalog, encode, encode_event
from services.gatekeeper.batch import Batch, Limits, Poison
from services.gatekeeper.partition import outputs
from services.gatekeeper.rules import Policy
from services.kafka.deadletters import DEAD_LETTER_KEY_LIMIT, dead_letter
from services.kafka.sizing import RecordLimit, record_size
from services.kafka.transactions import OutRecord

pytestmark = pytest.mark.unit

LIMIT = 8192
TOPICS = TopicCatalog("p")


def batch(
    committed: dict[str, ThreadState] | None = None,
    policy: Policy = REJECT,
    poison: dict[tuple[str, int, int], Poison] | None = None,
) -> Batch:
    limits = Limits(RecordLimit(LIMIT), agents=frozenset({"scripted"}))
    return Batch(committed or {}, NOW, policy, limits, poison=poison or {}, entropy=ENTROPY)


def keyed(thread_id: str, *, key: str | None = None, **kwargs: object) -> Rec:
    r = request("q1", "r1", thread_id=thread_id, **kwargs)  # type: ignore[arg-type]
    return Rec("p.requests", encode(r), key=(key if key is not None else thread_id).encode())


def written(b: Batch) -> list[OutRecord]:
    return outputs(TOPICS, 3, b)


def all_fit(b: Batch) -> bool:
    return all(fits(r, LIMIT) for r in written(b))


def test_an_id_over_the_limit_is_rejected_invalid_input_when_the_decision_fits() -> None:
    b = batch()
    b.request(keyed("t" * 1000))
    [decision] = b.decisions
    assert (decision.verdict, decision.code) == ("rejected", "invalid_input")
    assert "AGUI_MAX_ID_LENGTH" in decision.message
    assert b.states == {}
    assert b.dispatches == []
    assert b.dead_letters == []
    assert all_fit(b)


def test_a_request_whose_decision_cannot_fit_is_dead_lettered_and_nothing_else() -> None:
    """The decision's key and value both carry the threadId: a key of one byte does not help."""
    b = batch()
    b.request(keyed("t" * 5000, key="t"))
    assert b.decisions == []
    assert b.states == {}
    assert b.dispatches == []
    [letter] = b.dead_letters
    assert letter.code == "record_too_large"
    assert "decision would be a" in letter.reason
    assert f"limit of {LIMIT} bytes" in letter.reason
    assert all_fit(b)


def test_the_decision_is_measured_with_its_key() -> None:
    """A value alone under the limit, key and value over it: a dead letter, not a write."""
    b = batch()
    b.request(keyed("t" * 3000))  # decision ~3.2 KB value + 3 KB key: fits 8 KB
    assert b.dead_letters == []
    b = batch()
    b.request(keyed("t" * 3900))  # ~4.1 KB value + 3.9 KB key, over 8 KB together
    assert [d.code for d in b.dead_letters] == ["record_too_large"]
    decision_only = orjson.dumps({"threadId": "t" * 3900, "message": "x" * 300})
    assert len(decision_only) < LIMIT, "the value alone would have passed a value-only check"


def test_a_dead_letter_cuts_a_huge_key_and_headers_so_it_always_fits() -> None:
    key = b"k" * 400_000
    headers = [(f"h{i}", b"v" * 5000) for i in range(100)]
    letter = dead_letter(Rec("p.requests", b"x" * 900_000, key, headers), "oversize", "r" * 9000,
                         NOW, service="gatekeeper")
    assert letter.key is not None
    assert len(letter.key) == DEAD_LETTER_KEY_LIMIT
    assert "key cut to 1024 of 400000 characters" in letter.reason
    assert letter.headers is not None
    assert len(letter.headers) == 32
    assert len(letter.reason) < 2600
    assert record_size(letter.key.encode(), encode(letter)) < 1_048_576


def test_a_dead_letter_that_would_not_fit_even_cut_keeps_its_origin_and_reason() -> None:
    b = batch()
    record = Rec("p.requests", b"\x01" * 60_000, b"t1")  # escaped six-fold in the letter
    b.request(record)
    [letter] = b.dead_letters
    assert letter.value == ""
    assert "left out" in letter.reason
    assert (letter.source_topic, letter.offset) == ("p.requests", 42)
    assert all_fit(b)


def finishing(run_id: str, count: int, size: int) -> Rec:
    interrupts = [interrupt(f"i{n}", message="m" * size) for n in range(count)]
    event = RunFinishedEvent(thread_id="t1", run_id=run_id,
                             outcome=RunFinishedInterruptOutcome(interrupts=interrupts))
    return ev(run_id, "RUN_FINISHED", encode_event(event))


def test_a_boundary_whose_state_cannot_fit_closes_the_run_as_failed() -> None:
    b = batch({"t1": running("r0")})
    b.event(finishing("r0", 50, 300))
    state = b.states["t1"]
    assert (state.status, state.open_interrupts) == ("idle", [])
    [letter] = b.dead_letters
    assert letter.code == "record_too_large"
    assert "thread's state would be" in letter.reason
    assert "recorded as failed" in letter.reason
    assert all_fit(b)
    after = batch({"t1": state})
    after.request(req("q2", "r2"))
    assert [d.verdict for d in after.decisions] == ["admitted"], "the thread is free again"


def test_a_boundary_whose_state_fits_is_applied_as_it_came() -> None:
    b = batch({"t1": running("r0")})
    b.event(finishing("r0", 5, 100))
    assert b.states["t1"].status == "interrupted"
    assert b.dead_letters == []


def test_a_queued_request_is_decided_when_its_oversized_run_is_closed_as_failed() -> None:
    b = batch({"t1": running("r0")}, ENQUEUE)
    b.request(req("q1", "r1"))
    b.event(finishing("r0", 50, 300))
    assert [(d.request_id, d.verdict) for d in b.decisions] == [("q1", "queued"),
                                                                ("q1", "admitted")]
    assert b.states["t1"].run_id == "r1"
    assert all_fit(b)


def test_a_queued_admission_whose_dispatch_would_not_fit_is_rejected() -> None:
    queued = request("q1", "r1")
    queued.input.messages[0].content = "x" * 3000  # type: ignore[union-attr]
    start = running("r0").model_copy(update={"queued": [queued]})
    # the request itself would fit; its dispatch (key, decidedAt, framing) would not
    tight = Limits(RecordLimit(len(encode(queued)) + 20), agents=frozenset({"scripted"}))
    b = Batch({"t1": start}, NOW, ENQUEUE, tight, entropy=ENTROPY)
    b.event(ev("r0", "RUN_ERROR", ERROR))
    [decision] = b.decisions
    assert (decision.verdict, decision.code) == ("rejected", "invalid_input")
    assert "dispatch would be a" in decision.message
    assert b.dispatches == []
    assert b.states["t1"].status == "idle"


def test_outputs_name_the_input_they_were_made_from() -> None:
    b = batch({"t1": running("r0")}, ENQUEUE)
    b.request(Rec("p.requests", encode(request("q1", "r1")), offset=7))
    b.event(Rec("p.events", ERROR, b"t1", ev("r0", "RUN_ERROR", ERROR).headers, offset=9))
    b.request(Rec("p.requests", b"garbage", offset=8))
    sources = {(r.topic, r.source) for r in written(b)}
    assert sources == {
        ("p.decisions", ("p.requests", 3, 7)),  # queued
        ("p.decisions", ("p.events", 3, 9)),  # admitted when the run closed
        ("p.dispatch.scripted", ("p.events", 3, 9)),
        ("p.deadletter", ("p.requests", 3, 8)),
        ("p.threads", ("p.events", 3, 9)),
    }


def test_a_poisoned_request_is_dead_lettered_with_its_reason_instead_of_decided() -> None:
    reason = "its p.threads record of 9000 bytes was refused by the broker as too large"
    b = batch(poison={("p.requests", 3, 42): Poison(reason)})
    b.request(req("q1", "r1"))
    assert b.decisions == []
    assert b.states == {}
    [letter] = b.dead_letters
    assert (letter.code, letter.reason) == ("record_too_large", reason)
    assert letter.value == encode(request("q1", "r1")).decode()
    again = batch(poison={("p.requests", 3, 42): Poison(reason, 2)})
    again.request(req("q1", "r1"))
    assert again.dead_letters[0].value == "", "refused twice: the letter is cut to its origin"


def test_a_poisoned_boundary_is_dead_lettered_and_its_run_closed_as_failed() -> None:
    poison = {("p.events", 3, 42): Poison("refused")}
    b = batch({"t1": running("r0")}, poison=poison)
    b.event(finishing("r0", 2, 10))
    assert b.states["t1"].status == "idle"
    assert [letter.code for letter in b.dead_letters] == ["record_too_large"]
    stuck = batch({"t1": running("r0")}, poison={("p.events", 3, 42): Poison("refused", 2)})
    stuck.event(finishing("r0", 2, 10))
    assert stuck.states == {}, "refused twice: nothing but the dead letter is written"
    assert [letter.value for letter in stuck.dead_letters] == [""]


def test_every_dead_letter_record_decodes() -> None:
    b = batch()
    b.request(Rec("p.requests", b"x" * 100, b"k" * 5000))
    for record in written(b):
        assert record.topic == "p.deadletter"
        DeadLetter.model_validate_json(record.value)
        assert fits(record, LIMIT)


def finished_with(interrupt_json: bytes) -> bytes:
    """A RUN_FINISHED body as a writer outside the relay could make it (no encoder involved)."""
    return (b'{"type":"RUN_FINISHED","threadId":"t1","runId":"r0",'
            b'"outcome":{"type":"interrupt","interrupts":[' + interrupt_json + b"]}}")


NESTED = b'{"d":' * 300 + b'"leaf"' + b"}" * 300
"""300 levels: parsed by orjson (1,024), past what it writes (255)."""


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (finished_with(b'{"id":"' + b"i" * 300 + b'","reason":"approve"}'),
         "outcome/interrupts/0/id is 300 characters long"),
        (finished_with(b'{"id":"a","reason":"approve","metadata":' + NESTED + b"}"),
         "nested deeper than 64 levels"),
    ],
    ids=["interrupt-id-too-long", "nested-past-what-orjson-writes"],
)
def test_a_run_finished_breaking_a_limit_is_dead_lettered_and_its_run_failed(
    body: bytes, fragment: str
) -> None:
    b = batch({"t1": running("r0")})
    b.event(ev("r0", "RUN_FINISHED", body))
    assert b.states["t1"].status == "idle"
    assert b.states["t1"].open_interrupts == []
    [letter] = b.dead_letters
    assert letter.code == "invalid_event"
    assert fragment in letter.reason
    assert all_fit(b)
