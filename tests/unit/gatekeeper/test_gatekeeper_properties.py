"""Hypothesis properties of the rule engine, the issue's (a) to (e).

Threads are generated with random open interrupts whose ``expiresAt`` is
written in the forms producers send (toISOString, offsets, RFC 2822,
date-only, garbage) around ``NOW``; whether each one is *truly* expired is
computed here from the instant the string was made from, not by the
gatekeeper's parser, so the properties check the parser too.

(a) no admitted request leaves an open interrupt uncovered;
(b) no admitted request resolves an interrupt with ``expiresAt <= now``;
(c) covering everything, cancelling the expired, is always admitted;
(d) at most one admission per set of open interrupts, whatever the
    interleaving of requests and stray run boundaries, under both policies;
(e) re-deciding a requestId is idempotent: same decision, no dispatch, no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Literal

import pytest
from ag_ui.core import Interrupt, ResumeEntry
from gatekeeper_builders import (
    ENQUEUE,
    LENIENT,
    NOW,
    REJECT,
    entry,
    failed,
    idle_after,
    interrupted,
    interrupted_by,
    iso,
    request,
    running,
    started,
    succeeded,
)
from hypothesis import event, given, settings
from hypothesis import strategies as st

from contracts import RunRequest, ThreadState
from services.gatekeeper.rules import Outcome, Policy, decide, on_boundary
from services.gatekeeper.thread import Boundary

pytestmark = pytest.mark.unit

STATUS: st.SearchStrategy[Literal["resolved", "cancelled"]] = st.sampled_from(
    ["resolved", "cancelled"]
)
IDS = ["a", "b", "c", "d", "e"]
UNKNOWN = ["x", "y"]
POLICIES = st.sampled_from(
    [REJECT, ENQUEUE, LENIENT, Policy(busy="enqueue", unknown_entry="lenient")]
)


@dataclass(frozen=True)
class Expiring:
    """An expiresAt text and whether it is truly expired at NOW."""

    text: str | None
    expired: bool


def _ms(delta_ms: int) -> datetime:
    return NOW + timedelta(milliseconds=delta_ms)


def _iso_offset(moment: datetime, minutes: int) -> str:
    local = moment.astimezone(timezone(timedelta(minutes=minutes)))
    sign = "+" if minutes >= 0 else "-"
    hh, mm = divmod(abs(minutes), 60)
    return (
        local.strftime("%Y-%m-%dT%H:%M:%S.")
        + f"{local.microsecond // 1000:03d}{sign}{hh:02d}:{mm:02d}"
    )


NEAR_MS = st.sampled_from([-86_400_000, -1000, -1, 0, 0, 0, 1, 1, 1000, 86_400_000]) | st.integers(
    -3_600_000, 3_600_000
)
"""Offsets from NOW in ms, biased to the boundary: the instant itself is expired."""
OFFSETS = st.sampled_from([-720, -300, 0, 60, 330, 840])
GARBAGE = st.sampled_from(["soon", "never", "", "N/A", "31/31/2026", "2026-03-01T25:00:00Z"])


@st.composite
def expiries(draw: st.DrawFn) -> Expiring:
    form = draw(st.sampled_from(["none", "iso", "offset", "rfc2822", "date", "garbage"]))
    if form == "none":
        return Expiring(None, False)
    if form == "garbage":
        return Expiring(draw(GARBAGE), False)
    if form == "date":
        day = datetime(NOW.year, NOW.month, NOW.day, tzinfo=UTC) + timedelta(
            days=draw(st.integers(-2, 2))
        )
        return Expiring(day.strftime("%Y-%m-%d"), day <= NOW)
    moment = _ms(draw(NEAR_MS))
    if form == "rfc2822":
        moment = moment.replace(microsecond=0)
        return Expiring(format_datetime(moment, usegmt=True), moment <= NOW)
    text = iso(moment) if form == "iso" else _iso_offset(moment, draw(OFFSETS))
    return Expiring(text, moment <= NOW)


@dataclass(frozen=True)
class Open:
    """An interrupted thread and the truth about its interrupts' expiry."""

    state: ThreadState
    expired: frozenset[str]


@st.composite
def interrupted_threads(draw: st.DrawFn) -> Open:
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=len(IDS), unique=True))
    made = {i: draw(expiries()) for i in ids}
    interrupts = [Interrupt(id=i, reason="approve", expires_at=e.text) for i, e in made.items()]
    return Open(interrupted(*interrupts), frozenset(i for i, e in made.items() if e.expired))


@st.composite
def resume_lists(draw: st.DrawFn, open_ids: list[str]) -> list[ResumeEntry]:
    """Half the time one entry per open id (random status); otherwise any mix of
    omitted, duplicated and unknown entries."""
    status = STATUS
    if draw(st.booleans()):
        out = [entry(i, draw(status)) for i in open_ids]
    else:
        out = []
        for i in open_ids:
            out += [entry(i, draw(status)) for _ in range(draw(st.sampled_from([0, 1, 1, 2])))]
        out += [
            entry(i, draw(status)) for i in draw(st.lists(st.sampled_from(UNKNOWN), max_size=2))
        ]
    return draw(st.permutations(out))


def _open_ids(state: ThreadState) -> list[str]:
    return [o.interrupt.id for o in state.open_interrupts]


@given(thread=interrupted_threads(), data=st.data(), policy=POLICIES)
@settings(max_examples=300)
def test_a_and_b_an_admitted_resume_covers_all_and_resolves_nothing_expired(
    thread: Open, data: st.DataObject, policy: Policy
) -> None:
    entries = data.draw(resume_lists(_open_ids(thread.state)))
    outcome = decide(thread.state, request("q", "r-new", resume=entries), NOW, policy)
    event(f"{outcome.decision.verdict} {outcome.decision.code or ''}")
    if outcome.decision.verdict != "admitted":
        assert outcome.dispatch is None
        assert outcome.decision.code is not None
        return
    covered = {e.interrupt_id for e in entries}
    assert set(_open_ids(thread.state)) <= covered  # (a)
    resolved = {e.interrupt_id for e in entries if e.status == "resolved"}
    assert not resolved & thread.expired  # (b)
    assert outcome.dispatch is not None
    assert outcome.dispatch.input.resume == entries


@given(thread=interrupted_threads(), data=st.data(), policy=POLICIES)
def test_c_covering_everything_and_cancelling_the_expired_is_admitted(
    thread: Open, data: st.DataObject, policy: Policy
) -> None:
    entries = [
        entry(
            i,
            "cancelled" if i in thread.expired else data.draw(STATUS),
        )
        for i in _open_ids(thread.state)
    ]
    entries = data.draw(st.permutations(entries))
    outcome = decide(thread.state, request("q", "r-new", resume=entries), NOW, policy)
    assert outcome.decision.verdict == "admitted", outcome.decision.message
    assert outcome.state.status == "running"
    assert outcome.state.open_interrupts == []


def _stray(open_ids: list[str]) -> st.SearchStrategy[Boundary]:
    """Boundaries that must not reopen the thread: late or duplicate ones for the
    interrupted run r0, and any for runs the gatekeeper never admitted."""
    runs = st.sampled_from(["r0", "zz"])
    return st.one_of(
        runs.map(failed),
        runs.map(succeeded),
        runs.map(lambda r: interrupted_by(r, *(Interrupt(id=i, reason="again") for i in open_ids))),
        st.just(started("r0")),
    )


@given(thread=interrupted_threads(), data=st.data(), policy=POLICIES)
@settings(max_examples=200)
def test_d_at_most_one_admission_per_set_of_open_interrupts(
    thread: Open, data: st.DataObject, policy: Policy
) -> None:
    open_ids = _open_ids(thread.state)
    state = thread.state
    dispatched: list[str] = []
    steps = data.draw(
        st.lists(
            st.one_of(
                st.tuples(st.integers(0, 4), st.integers(1, 4), resume_lists(open_ids)).map(
                    lambda t: request(f"q{t[0]}", f"r{t[1]}", resume=t[2])
                ),
                _stray(open_ids),
            ),
            min_size=2,
            max_size=10,
        )
    )
    for step in steps:
        if isinstance(step, RunRequest):
            outcome = decide(state, step, NOW, policy)
            if outcome.dispatch is not None:
                dispatched.append(outcome.dispatch.input.run_id)
            state = outcome.state
        else:
            state, outcomes = on_boundary(state, step, NOW, policy)
            dispatched += [o.dispatch.input.run_id for o in outcomes if o.dispatch]
    event(f"dispatched {len(dispatched)}")
    assert len(dispatched) <= 1, dispatched
    if dispatched:
        assert (state.status, state.run_id) == ("running", dispatched[0])
    else:
        assert state.status == "interrupted"
        assert _open_ids(state) == open_ids


@st.composite
def any_threads(draw: st.DrawFn) -> ThreadState:
    kind = draw(st.sampled_from(["idle", "running", "interrupted"]))
    if kind == "idle":
        return idle_after("r0")
    if kind == "running":
        return running("r0")
    return draw(interrupted_threads()).state


@st.composite
def requests(draw: st.DrawFn, request_id: str) -> RunRequest:
    resume = draw(st.none() | resume_lists(IDS[:3]))
    return request(request_id, f"r{draw(st.integers(0, 5))}", resume=resume)


@given(state=any_threads(), data=st.data(), policy=POLICIES)
def test_e_re_deciding_a_request_id_is_idempotent(
    state: ThreadState, data: st.DataObject, policy: Policy
) -> None:
    first = decide(state, data.draw(requests("q-retried")), NOW, policy)
    later = first.state
    for n in range(data.draw(st.integers(0, 20))):
        other: Outcome = decide(later, data.draw(requests(f"q{n}")), NOW, policy)
        later = other.state
    event(f"first {first.decision.verdict}")
    retried = decide(later, data.draw(requests("q-retried")), NOW + timedelta(hours=1), policy)
    assert retried.decision == first.decision.model_copy(update={"replayed": True})
    assert retried.dispatch is None
    assert retried.state is later


@given(state=any_threads(), data=st.data(), policy=POLICIES)
def test_every_request_gets_one_complete_decision(
    state: ThreadState, data: st.DataObject, policy: Policy
) -> None:
    req = data.draw(requests("q"))
    outcome = decide(state, req, NOW, policy)
    d = outcome.decision
    assert d.request_id == "q"
    assert d.thread_id == state.thread_id
    assert d.message
    assert (d.verdict == "rejected") == (d.code is not None)
    assert (outcome.dispatch is not None) == (d.verdict == "admitted")
    assert len(outcome.state.recent_run_ids) <= 16
    assert len(outcome.state.recent_decisions) <= 32
