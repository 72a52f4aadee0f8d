"""The expiry policy's pure half: when a thread lapses, and the resume that cancels it.

With ``AGUI_ON_EXPIRY=cancel`` the gatekeeper itself resumes a thread once
EVERY open interrupt on it has expired (read by the shared rule,
``services.agui.expiry``): one interrupt that never expires, or whose
``expiresAt`` is unreadable, keeps the thread waiting for a person. The
resume is a ``RunRequest`` like any client's, published to ``requests`` and
decided by ``rules`` in the gatekeeper's transaction, so it is decided,
dispatched and recorded exactly once like any request. What makes it once:

- its ids are derived from the interruption, not drawn: request id
  ``expiry:<interruptedRunId>``, run id ``expired-<digest>``; a copy
  published again (after a restart, a rebalance, a retried send) is the same
  request id, answered with the remembered decision and never dispatched;
- ``refusal`` admits it only while the thread is still waiting on that very
  run's interrupts and all of them have expired by the deciding clock: a
  client's resume admitted first leaves it rejected (``thread_busy`` while
  the resumed run runs, ``unknown_interrupt`` after), and it is never queued
  nor forwarded leniently;
- it carries the thread owner's principal (tenancy is unchanged) and
  ``policy: "expiry"``, which the decision records and which the dispatched
  entries name as their answerer (``policy:expiry``, ``answerer``).

``Deadlines`` is the timer: one heap entry per thread whose interrupts all
expire (a thread with none that expires costs nothing), stale entries
dropped when they come due. Pure: the clock is an argument.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from ag_ui.core import RunAgentInput

from contracts.records import EXPIRY_REQUEST_PREFIX, RejectionCode, RunRequest, ThreadState
from services.agui.expiry import read_expiry
from services.agui.jsdate import to_epoch_ms

REQUEST_PREFIX = EXPIRY_REQUEST_PREFIX
_LONGEST_RUN_ID_SHOWN = 190
"""A longer interrupted runId is named by its digest (a requestId holds 200 characters)."""


def lapses_at(state: ThreadState) -> int | None:
    """When every open interrupt of ``state`` has expired (JS epoch ms), or None.

    None for a thread that is not interrupted, and for one with any open
    interrupt that never expires (no ``expiresAt``, or one JS cannot read).
    """
    if state.status != "interrupted" or not state.open_interrupts:
        return None
    latest = -(2**63)
    for opened in state.open_interrupts:
        ms = read_expiry(opened.interrupt.expires_at).epoch_ms
        if ms is None:
            return None
        latest = max(latest, ms)
    return latest


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def request_id_for(interrupted_run_id: str) -> str:
    """The one request id of the expiry resume of ``interrupted_run_id``."""
    if len(interrupted_run_id) <= _LONGEST_RUN_ID_SHOWN:
        return REQUEST_PREFIX + interrupted_run_id
    return f"{REQUEST_PREFIX}sha256:{_digest(interrupted_run_id)}"


def run_id_for(interrupted_run_id: str) -> str:
    """The run id of the expiry resume of ``interrupted_run_id`` (same every time)."""
    return f"expired-{_digest(interrupted_run_id)}"


def expiry_request(state: ThreadState, history: Mapping[str, Any], now: datetime) -> RunRequest:
    """The resume cancelling every open interrupt of ``state``.

    ``history``: the ``RunAgentInput`` members the thread's events add up to
    (``Transcript.input_fields()``: messages, state, tools, context,
    forwardedProps), as ``agui-relay resume`` sends them. Raises
    ``ValueError`` for a thread that has no interrupted run or agent.
    """
    if state.interrupted_run_id is None or state.agent is None:
        raise ValueError(f"thread {state.thread_id!r} has no interrupted run to resume")
    run_input = RunAgentInput.model_validate({
        **history,
        "threadId": state.thread_id,
        "runId": run_id_for(state.interrupted_run_id),
        "resume": [{"interruptId": o.interrupt.id, "status": "cancelled"}
                   for o in state.open_interrupts],
    })
    return RunRequest(request_id=request_id_for(state.interrupted_run_id), agent=state.agent,
                      input=run_input, submitted_at=now, principal=state.principal,
                      policy="expiry")


def refusal(state: ThreadState, request: RunRequest,
            now: datetime) -> tuple[RejectionCode, str] | None:
    """Why the expiry policy's ``request`` may not resume ``state`` now (None: it may)."""
    waiting = state.status == "interrupted" and state.interrupted_run_id is not None
    if not waiting or request.request_id != request_id_for(state.interrupted_run_id or ""):
        return ("thread_busy" if state.status == "running" else "unknown_interrupt",
                f"expiry policy: thread {state.thread_id!r} is no longer waiting on the "
                "interrupts this request cancels (it was resumed first); nothing cancelled")
    at = lapses_at(state)
    if at is None or at > to_epoch_ms(now):
        return ("invalid_input", f"expiry policy: not every open interrupt of thread "
                f"{state.thread_id!r} has expired at {now.isoformat()}; nothing cancelled")
    return None


def late_answer(state: ThreadState, named: Iterable[str]) -> tuple[RejectionCode, str] | None:
    """A client's answer to an interrupt the expiry policy already cancelled: still
    ``interrupt_expired``, whether the cancelling run is running or done."""
    opened = {o.interrupt.id for o in state.open_interrupts}
    late = [i for i in dict.fromkeys(named) if i in (state.lapsed or ()) and i not in opened]
    if not late:
        return None
    return ("interrupt_expired", f"interrupts {', '.join(late)} expired and were cancelled by "
            "the expiry policy (AGUI_ON_EXPIRY=cancel); they can no longer be answered")


def admitted_message(state: ThreadState) -> str:
    """The admitted decision's message: it was the expiry policy."""
    ids = ", ".join(o.interrupt.id for o in state.open_interrupts)
    return (f"expiry policy (AGUI_ON_EXPIRY=cancel): every open interrupt of run "
            f"{state.interrupted_run_id!r} expired; cancelled {ids}")


Key = tuple[int, str]
"""(partition, threadId)."""
HEAP_SLACK = 1024
"""Superseded entries the heap may hold beyond its live ones before it is rebuilt."""


class Deadlines:
    """Threads of owned partitions whose interrupts all expire, by when they lapse.

    An entry superseded (the thread resumed, interrupted again, handed back) stays
    in the heap until its instant unless the heap is rebuilt: with a 7-day
    ``AGUI_DEFAULT_INTERRUPT_TTL`` and interrupts answered within minutes, that was
    one entry per answered interruption for a week (and for ever at a far
    ``expiresAt``), so past twice the live entries and a slack it is rebuilt from
    them (found by review).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, str]] = []
        self._watched: dict[Key, tuple[int, str]] = {}
        """What each lapsing thread is watched for: (lapses at, interrupted run id)."""

    def __len__(self) -> int:
        return len(self._watched)

    def watch(self, partition: int, states: Iterable[ThreadState]) -> None:
        """Take note of the latest states of ``partition``'s threads."""
        for state in states:
            key = (partition, state.thread_id)
            at = lapses_at(state)
            if at is None or state.interrupted_run_id is None:
                self._watched.pop(key, None)
                continue
            entry = (at, state.interrupted_run_id)
            if self._watched.get(key) != entry:
                self._watched[key] = entry
                heapq.heappush(self._heap, (at, partition, state.thread_id, entry[1]))
        self._compact()

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions handed back: their threads are another instance's."""
        gone = set(partitions)
        self._watched = {k: v for k, v in self._watched.items() if k[0] not in gone}
        self._compact()

    def retry(self, partition: int, state: ThreadState, at_ms: int) -> None:
        """Come back to a thread ``due`` gave out at ``at_ms`` (its resume was not sent)."""
        if state.interrupted_run_id is not None:
            key = (partition, state.thread_id)
            self._watched[key] = (at_ms, state.interrupted_run_id)
            heapq.heappush(self._heap, (at_ms, partition, state.thread_id,
                                        state.interrupted_run_id))
            self._compact()

    @property
    def entries(self) -> int:
        """Entries in the heap, superseded ones included (bounded by ``_compact``)."""
        return len(self._heap)

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._watched) + HEAP_SLACK:
            self._heap = [(at, p, thread_id, run_id)
                          for (p, thread_id), (at, run_id) in self._watched.items()]
            heapq.heapify(self._heap)

    def next_at(self) -> int | None:
        """When the earliest entry comes due (it may be stale)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int,
            current: Callable[[int, str], ThreadState | None]) -> list[tuple[int, ThreadState]]:
        """The threads lapsed by ``now_ms``, each once, as ``current`` says they are now."""
        out: list[tuple[int, ThreadState]] = []
        while self._heap and self._heap[0][0] <= now_ms:
            at, partition, thread_id, run_id = heapq.heappop(self._heap)
            key = (partition, thread_id)
            if self._watched.get(key) != (at, run_id):
                continue  # superseded: resumed, re-interrupted, or handed back
            del self._watched[key]
            state = current(partition, thread_id)
            if state is not None and state.interrupted_run_id == run_id:
                out.append((partition, state))
        return out
