"""A thread state's remembered decisions are bounded, whatever clients send.

``ThreadState`` keeps the last 32 decisions, but each remembered decision kept
every interrupt id its request named (client-chosen: up to 256 ids of 256
characters) and a message listing them again, so 32 of them could fill a
record (found by probing): the next run's interrupt then no longer fit its
thread's state, was dead-lettered and the thread left idle, while every client
had seen the run end interrupted. Each remembered decision now keeps at most
``REMEMBERED_IDS`` ids and ``REMEMBERED_TEXT`` characters of text.
"""

from __future__ import annotations

import pytest
from ag_ui.core import RunFinishedEvent, RunFinishedInterruptOutcome, RunStartedEvent
from gatekeeper_builders import ENTROPY, NOW, REJECT, interrupt, interrupted, request, resolve
from test_gatekeeper_batch import Rec, ev

from contracts import ThreadState, encode, encode_event
from services.gatekeeper import wire
from services.gatekeeper.batch import Batch, Limits
from services.kafka.sizing import RecordLimit

pytestmark = pytest.mark.unit

LIMIT = 1_048_576  # AGUI_MAX_RECORD_BYTES' default
MAX_ID = 256  # AGUI_MAX_ID_LENGTH's default
MAX_ENTRIES = 256  # AGUI_MAX_RESUME_ENTRIES' default


def size(state: ThreadState) -> int:
    return len(wire.state(state)) + len(state.thread_id)


def test_rejected_resumes_cannot_wedge_a_thread_past_its_answer() -> None:
    b = Batch({"t1": interrupted(interrupt("a"))}, NOW, REJECT,
              Limits(RecordLimit(LIMIT), agents=frozenset({"scripted"})), entropy=ENTROPY)
    sent = 0
    # A client (or a buggy front end) answers with interrupt ids that are not open:
    # each is rejected unknown_interrupt and remembered with every id it named.
    for width, count in [(MAX_ID - 4, MAX_ENTRIES), (MAX_ID - 4, 32), (MAX_ID - 4, 4),
                         (40, 1), (1, 1)]:
        while sent < 31:
            ids = [f"{sent:03d}{n:04d}".ljust(width, "x")[:width] for n in range(count)]
            before = b.state("t1")
            b.request(Rec("p.requests", encode(request(f"bad-{sent}", f"rb-{sent}",
                                                       resume=resolve(*ids)))))
            sent += 1
            if b.state("t1") is before:  # refused invalid_input: the state would not fit
                break
    bloated = b.state("t1")
    assert bloated.status == "interrupted"

    # The one correct answer: resolve the open interrupt.
    b.request(Rec("p.requests", encode(request("good", "r-good", resume=resolve("a")))))
    verdicts = {d.request_id: (d.verdict, d.code) for d in b.decisions}
    assert verdicts["good"] == ("admitted", None)
    assert all(code == "unknown_interrupt" for rid, (_, code) in verdicts.items()
               if rid != "good")

    # The resumed run starts, and its agent asks one more question (a 2 KiB
    # message: far within the producer's quarter-of-a-record limit on an outcome).
    b.event(ev("r-good", "RUN_STARTED", encode_event(RunStartedEvent(
        thread_id="t1", run_id="r-good"))))
    b.event(ev("r-good", "RUN_FINISHED", encode_event(RunFinishedEvent(
        thread_id="t1", run_id="r-good", outcome=RunFinishedInterruptOutcome(
            interrupts=[interrupt("b", message="m" * 2048)])))))
    after = b.state("t1")
    # Every client streaming the run saw RUN_FINISHED with interrupt b; the
    # gatekeeper must hold the thread interrupted on it, not closed as failed.
    assert b.dead_letters == []
    assert after.status == "interrupted"
    assert [o.interrupt.id for o in after.open_interrupts] == ["b"]


def test_a_thread_state_stays_within_a_fraction_of_the_record_limit() -> None:
    """What the thread remembers is bounded by configuration, not by what clients
    sent: 32 remembered decisions must not be able to fill a whole record."""
    b = Batch({"t1": interrupted(interrupt("a"))}, NOW, REJECT,
              Limits(RecordLimit(LIMIT), agents=frozenset({"scripted"})), entropy=ENTROPY)
    for k in range(6):
        ids = [f"{k:03d}{n:04d}".ljust(MAX_ID - 4, "x") for n in range(MAX_ENTRIES)]
        b.request(Rec("p.requests", encode(request(f"bad-{k}", f"rb-{k}",
                                                   resume=resolve(*ids)))))
    state = b.state("t1")
    assert len(state.recent_decisions) == 7  # the first run's admission, then the six
    assert size(state) < LIMIT // 4
