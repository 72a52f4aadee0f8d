"""Which threads are stuck: running too long, or holding interrupts past their expiry.

Two readers need the same answer from the same thread states: the
gatekeeper, which publishes it as gauges from the states it owns, and
``agui-relay stuck``, which reads them from the compacted ``threads`` topic.
Both go through this module, so the report and the gauges count alike:

- a thread *runs too long* when it is ``running`` and its run started
  (``runStartedAt``, set at admission) longer ago than the limit;
- an interrupt is *expired and unanswered* when it is still open and its
  ``expiresAt`` reads (as ``@ag-ui/client`` reads it, ``services.agui.expiry``) as a time
  at or before ``now``. An expired interrupt cannot be resolved any more,
  only cancelled, so such a thread waits for an operator.

A delegation's child thread (``parentRunId``) holds interrupts its parent
carried up and offers: they are counted apart (``child_interrupts``), never
as open or expired ones, so a pipeline's one question counts once, where it
is answered. Whether the parent still waits on a child needs the parent's
state too: ``agui-relay stuck`` reads every thread and lists the orphans
(``services.cli.ops.orphans``).

``Census`` keeps the states of the non-idle threads of each owned partition
(an idle thread with no open interrupt can be neither), so counting walks
only those, and only what counting reads of them (``slim``: status, run
start, each open interrupt's id, reason and expiry), so a million threads
with one in fifty interrupted cost tens of megabytes, not hundreds;
``expiresAt`` is parsed when counted, never on the decision path, and each
distinct text once. Pure: ``now`` is an argument.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from ag_ui.core import Interrupt

from contracts import OpenInterrupt, ThreadState
from services.agui.expiry import read_expiry
from services.agui.jsdate import to_epoch_ms


@functools.lru_cache(maxsize=65_536)
def _expiry_ms(expires_at: str) -> int | None:
    return read_expiry(expires_at).epoch_ms


def expired_ids(state: ThreadState, now: datetime) -> list[str]:
    """The open interrupts of ``state`` past their expiry at ``now``."""
    now_ms = to_epoch_ms(now)
    out = []
    for opened in state.open_interrupts:
        text = opened.interrupt.expires_at
        if text is None:
            continue
        at = _expiry_ms(text)
        if at is not None and at <= now_ms:
            out.append(opened.interrupt.id)
    return out


def running_for(state: ThreadState, now: datetime) -> timedelta | None:
    """How long the thread's current run has been running (None when not running)."""
    if state.status != "running" or state.run_started_at is None:
        return None
    return now - state.run_started_at


@dataclass(frozen=True, slots=True)
class Stuck:
    """One thread that needs an operator's look, and why."""

    state: ThreadState
    running: timedelta | None
    """How long its run has run, when longer than the limit."""
    expired: tuple[str, ...]
    """Its open interrupts past their expiry."""


@dataclass(frozen=True, slots=True)
class Counts:
    """The numbers the gauges and the report's summary show."""

    running: int = 0
    interrupted: int = 0
    open_interrupts: int = 0
    """Open interrupts a person is offered: a child thread's are not."""
    expired_interrupts: int = 0
    running_too_long: int = 0
    child_interrupts: int = 0
    """Open interrupts of delegations' child threads, carried up and offered at the parent."""


def examine(states: Iterable[ThreadState], now: datetime,
            running_limit: timedelta) -> tuple[Counts, list[Stuck]]:
    """Count the states and list the stuck ones (longest running / most expired first)."""
    running = interrupted = opened = expired_total = too_long = children = 0
    stuck = []
    for state in states:
        if state.status == "running":
            running += 1
        elif state.status == "interrupted":
            interrupted += 1
        if state.parent_run_id is not None:  # its parent offers these: counted there
            children += len(state.open_interrupts)
            expired: tuple[str, ...] = ()
        else:
            opened += len(state.open_interrupts)
            expired = tuple(expired_ids(state, now)) if state.open_interrupts else ()
        expired_total += len(expired)
        took = running_for(state, now)
        late = took if took is not None and took > running_limit else None
        too_long += late is not None
        if late is not None or expired:
            stuck.append(Stuck(state, late, expired))
    stuck.sort(key=lambda s: (-(s.running or timedelta()).total_seconds(), -len(s.expired),
                              s.state.thread_id))
    return Counts(running, interrupted, opened, expired_total, too_long, children), stuck


def slim(state: ThreadState) -> ThreadState:
    """What the census (and the expiry policy's deadlines) read of a thread: its status,
    runs and open interrupts reduced to id, reason and expiry; nothing it remembers."""
    return ThreadState(
        thread_id=state.thread_id, status=state.status, agent=state.agent,
        run_id=state.run_id, parent_run_id=state.parent_run_id,
        interrupted_run_id=state.interrupted_run_id,
        run_started_at=state.run_started_at, updated_at=state.updated_at,
        open_interrupts=[OpenInterrupt(run_id=o.run_id, interrupt=Interrupt(
            id=o.interrupt.id, reason=o.interrupt.reason, expires_at=o.interrupt.expires_at))
            for o in state.open_interrupts])


def _watched(state: ThreadState) -> bool:
    return state.status != "idle" or bool(state.open_interrupts)


class Census:
    """The non-idle thread states of the partitions one gatekeeper owns."""

    def __init__(self) -> None:
        self._partitions: dict[int, dict[str, ThreadState]] = {}

    def restore(self, partition: int, states: Mapping[str, ThreadState]) -> None:
        """Take partition ``partition`` over with its restored states."""
        self._partitions[partition] = {t: slim(s) for t, s in states.items() if _watched(s)}

    def include(self, partition: int, states: Mapping[str, ThreadState]) -> None:
        """Add states read after the takeover (``takeover.follow``); the caller leaves out
        the threads committed since, which ``update`` already holds newer."""
        watched = self._partitions.setdefault(partition, {})
        watched.update({t: slim(s) for t, s in states.items() if _watched(s)})

    def update(self, partition: int, states: Mapping[str, ThreadState]) -> None:
        """Apply the states a committed transaction of ``partition`` wrote."""
        watched = self._partitions.setdefault(partition, {})
        for thread_id, state in states.items():
            if _watched(state):
                watched[thread_id] = slim(state)
            else:
                watched.pop(thread_id, None)

    def release(self, partitions: Iterable[int]) -> None:
        """Forget partitions handed back."""
        for p in partitions:
            self._partitions.pop(p, None)

    def states(self) -> list[ThreadState]:
        """Every watched state, all partitions."""
        return [s for states in self._partitions.values() for s in states.values()]

    def count(self, now: datetime, running_limit: timedelta) -> Counts:
        """The gauges' numbers at ``now``."""
        return examine(self.states(), now, running_limit)[0]
