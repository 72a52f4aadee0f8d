"""What to notify when a thread's state changes: the interrupt lifecycle as webhook events.

The gatekeeper writes each thread's new state to the compacted ``threads``
topic; the notifier compares it with what it remembers of the thread and
says what happened, in this order:

- interrupts the thread held and no longer holds were **answered** (one
  event per run that raised them), with the admitted resume's decision and
  who answered (its principal and key name, ``tenant#name``, or
  ``policy:expiry``) when the new state remembers it (its
  ``recentDecisions`` end with the decision that moved the thread, written
  in the same transaction);
- interrupts it holds now and did not before make it **interrupted** (one
  event per raising run, the interrupts in full);
- and, separately (``expire``), open interrupts whose ``expiresAt`` (read
  exactly as the gatekeeper reads it, ``services.agui.expiry``) is at or
  before a given instant **expired**, once each.

Only threads with open interrupts are remembered (``Seen``): an idle or
running thread without any is indistinguishable from one never seen, so
memory is bounded by the interrupts waiting. A delegation's child thread
(``parentRunId``) is one without any: its interrupts are carried up to its
parent, which is where they are notified and answered, once. A tombstone forgets its thread
and notifies nothing.

An interrupt is known by its run, its id and when it was opened
(``openedAt``): a thread remembers only its last few runIds, so a later run
may reuse a runId and raise an interrupt of the same id, and that is another
question. Each event's delivery id is a digest of what it is about (topic,
kind, thread, run, and each interrupt's id with its ``openedAt``), so every
attempt and every replay of the same notification carries the same id and no
other notification does. ``openedAt`` rather than the offset of the record
that caused the event: the gatekeeper keeps it unchanged in every state
while the interrupt is open, so a notifier restarted after compaction, which
reads the question (and so answers or expires it) from whichever later
record survived, still names it the same; an expiry has no record at all.
States written before ``openedAt`` existed have the ``updatedAt`` of the
state the interrupt was first seen open in standing in (as in the inbox).
Pure: no I/O, the instants are arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import orjson
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, RememberedDecision, ThreadState
from contracts.records import EXPIRY_ANSWERER, identity
from contracts.webhooks import WebhookDecision, WebhookEvent, WebhookKind
from services.agui.expiry import read_expiry
from services.agui.jsdate import from_epoch_ms, to_epoch_ms

__all__ = ["Seen", "Waiting", "delivery_id", "expire", "seen_of", "transition"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One open interrupt as the notifier remembers it."""

    run_id: str
    interrupt_id: str
    opened_ms: int | None
    """When it was opened (``openedAt``, else the first state's ``updatedAt``), JS ms."""
    deadline_ms: int | None
    """``expiresAt`` as JS milliseconds; None: no expiry (absent or unreadable)."""
    expired: bool = False
    """Its expiry was notified already."""


@dataclass(frozen=True, slots=True)
class Seen:
    """What the notifier keeps of a thread that has open interrupts."""

    agent: str | None
    principal: str | None
    waiting: tuple[Waiting, ...]

    def deadlines(self) -> list[int]:
        """The expiries not notified yet."""
        return [w.deadline_ms for w in self.waiting if w.deadline_ms is not None and not w.expired]


def delivery_id(scope: str, kind: WebhookKind, thread_id: str, run_id: str,
                interrupts: Iterable[tuple[str, int | None]]) -> str:
    """The same id for the same notification, another for any other: a digest of what it
    is about, ``interrupts`` as (id, opened ms) pairs in any order."""
    opened = sorted(interrupts, key=lambda pair: pair[0])
    subject = orjson.dumps([scope, kind, thread_id, run_id, opened])
    return hashlib.sha256(subject).hexdigest()[:32]


def seen_of(state: ThreadState | None, before: Seen | None = None) -> Seen | None:
    """What to remember of ``state``: its open interrupts (None when it has none, or is a
    delegation's child, whose interrupts its parent carries up and is notified of).

    Interrupts ``before`` already knew keep their ``expired`` mark.
    """
    if (state is None or state.status != "interrupted" or not state.open_interrupts
            or state.parent_run_id is not None):
        return None
    waiting = []
    for opened in state.open_interrupts:
        waiting.append(_known(before, opened) or Waiting(
            opened.run_id, opened.interrupt.id, _opened_ms(opened, state),
            read_expiry(opened.interrupt.expires_at).epoch_ms))
    return Seen(state.agent, state.principal, tuple(waiting))


def _opened_ms(opened: OpenInterrupt, state: ThreadState) -> int | None:
    at = opened.opened_at or state.updated_at
    return to_epoch_ms(at) if at is not None else None


def _known(before: Seen | None, opened: OpenInterrupt) -> Waiting | None:
    """What ``before`` remembers of ``opened``: the same run and id and, when the state dates
    it, opened at the same instant (else a later run reusing both asks another question)."""
    for w in before.waiting if before else ():
        if (w.run_id, w.interrupt_id) == (opened.run_id, opened.interrupt.id) and (
                opened.opened_at is None or to_epoch_ms(opened.opened_at) == w.opened_ms):
            return w
    return None


def transition(scope: str, thread_id: str, before: Seen | None, state: ThreadState | None,
               at: datetime) -> tuple[Seen | None, list[WebhookEvent]]:
    """The thread's new memory and the events its change to ``state`` makes.

    ``at`` is when the change happened when the state does not say
    (``updatedAt``): the record's timestamp.
    """
    after = seen_of(state, before)
    if state is None:
        return None, []
    when = state.updated_at or at
    kept = set(after.waiting) if after else set()
    events: list[WebhookEvent] = []
    earlier = before.waiting if before else ()
    gone = [w for w in earlier if w not in kept]
    for run_id, ws in _by_run(gone):
        ids = [w.interrupt_id for w in ws]
        answering = _answering(state.recent_decisions, ids)
        events.append(WebhookEvent(
            kind="answered", delivery_id=delivery_id(scope, "answered", thread_id, run_id,
                                                     _subject(ws)),
            thread_id=thread_id, run_id=run_id,
            agent=(before.agent if before else None) or state.agent,
            principal=(before.principal if before else None) or state.principal,
            interrupt_ids=ids, decision=_webhook_decision(answering),
            answered_by=_answerer(answering), at=when))
    fresh = [(o, w) for o, w in zip(state.open_interrupts, after.waiting, strict=True)
             if _known(before, o) is None] if after else []
    for run_id, (opened, ws) in _opened_by_run(fresh):
        ids = [o.id for o in opened]
        events.append(WebhookEvent(
            kind="interrupted",
            delivery_id=delivery_id(scope, "interrupted", thread_id, run_id, _subject(ws)),
            thread_id=thread_id, run_id=run_id, agent=state.agent, principal=state.principal,
            interrupt_ids=ids, interrupts=opened, at=when))
    return after, events


def expire(scope: str, thread_id: str, seen: Seen, until_ms: int
           ) -> tuple[Seen, list[WebhookEvent]]:
    """Mark the interrupts expired at or before ``until_ms``; one event per run and instant."""
    due = [w for w in seen.waiting
           if w.deadline_ms is not None and not w.expired and w.deadline_ms <= until_ms]
    if not due:
        return seen, []
    groups: dict[tuple[int, str], list[Waiting]] = {}
    for w in sorted(due, key=lambda w: (w.deadline_ms or 0)):
        groups.setdefault((w.deadline_ms or 0, w.run_id), []).append(w)
    events = [
        WebhookEvent(
            kind="expired",
            delivery_id=delivery_id(scope, "expired", thread_id, run_id, _subject(ws)),
            thread_id=thread_id, run_id=run_id, agent=seen.agent, principal=seen.principal,
            interrupt_ids=[w.interrupt_id for w in ws], at=from_epoch_ms(deadline))
        for (deadline, run_id), ws in groups.items()
    ]
    marked = tuple(replace(w, expired=True) if w in due else w for w in seen.waiting)
    return replace(seen, waiting=marked), events


def _subject(waiting: Iterable[Waiting]) -> list[tuple[str, int | None]]:
    """What a delivery id names of the interrupts: each one's id and when it was opened."""
    return [(w.interrupt_id, w.opened_ms) for w in waiting]


def _by_run(waiting: Iterable[Waiting]) -> list[tuple[str, list[Waiting]]]:
    runs: dict[str, list[Waiting]] = {}
    for w in waiting:
        runs.setdefault(w.run_id, []).append(w)
    return list(runs.items())


def _opened_by_run(fresh: Sequence[tuple[OpenInterrupt, Waiting]]
                   ) -> list[tuple[str, tuple[list[Interrupt], list[Waiting]]]]:
    runs: dict[str, tuple[list[Interrupt], list[Waiting]]] = {}
    for o, w in fresh:
        interrupts, ws = runs.setdefault(o.run_id, ([], []))
        interrupts.append(o.interrupt)
        ws.append(w)
    return list(runs.items())


def _answering(decisions: Sequence[RememberedDecision], ids: list[str]
               ) -> RememberedDecision | None:
    """The newest admitted decision naming every one of ``ids`` (the resume that answered)."""
    for d in reversed(decisions):
        if d.verdict == "admitted" and set(ids) <= set(d.interrupt_ids or ()):
            return d
    return None


def _webhook_decision(d: RememberedDecision | None) -> WebhookDecision | None:
    if d is None:
        return None
    return WebhookDecision(request_id=d.request_id, run_id=d.run_id, message=d.message,
                           decided_at=d.decided_at)


def _answerer(d: RememberedDecision | None) -> str | None:
    """Who answered with decision ``d``: the expiry policy, else its principal and key."""
    if d is None:
        return None
    return EXPIRY_ANSWERER if d.policy == "expiry" else identity(d.principal, d.key_name)
