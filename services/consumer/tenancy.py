"""Thread ownership: a thread belongs to the tenant that started it.

The owner is ``ThreadState.principal`` on the compacted ``threads`` topic:
the gatekeeper sets it from ``RunRequest.principal`` when it admits the
thread's first run, and never changes it afterwards. This service publishes
the caller's tenant (``auth``) as that principal, and answers another
tenant's POST on the thread, ``GET /threads/{id}``, its replays and its
cancels with the same ``404 unknown_thread`` a thread that does not exist
gets — a 403 would tell that the id is taken. The rules (``may_read``,
``may_run``):

- an owned thread is for its owner only;
- an unowned thread (its runs came from a writer that set no principal:
  the CLI, a pipeline's child runs) is open to everyone while
  authentication is off, and to no tenant when it is on — except that any
  tenant may start the first run of a thread that never ran (a thread whose
  only records are rejections), which makes it the owner.

Checks use this instance's thread view, so a POST on another tenant's thread
is refused *before* anything is published. Two gaps remain, both closed
elsewhere: a thread started a moment ago by another tenant may not be in the
view yet — the gatekeeper, the backstop, rejects a request whose principal
is not the thread's owner with ``key_mismatch`` (a code this service can
get for no other reason, since it keys every request by its threadId), and
``rejection`` turns that into the same 404; and a replay or cancel of a run
this instance saw admitted may come before the view has its state — the
state commits in the same transaction as the decision, so ``readable``
waits for it up to ``SETTLE_S``. Two tenants starting one new thread id at
once: the gatekeeper admits one, the other gets the 404.

A foreign thread and a thread that does not exist must answer alike on every
route, or a tenant could probe which ids are taken. Reading, replaying and
cancelling answer both with ``unknown_thread``; ``GET /threads/{id}``'s wait
for a state past a run's end (``freshness``) comes only after the ownership
check, so it tells another tenant nothing either. A POST carrying resume
entries needs one more rule: on an id nobody used, the gatekeeper rejects
the entries (``unknown_interrupt``, 422, a message about what is open), on
another tenant's thread this service answers the 404. Both now answer the
404: a request sent while the view showed no run of the thread (no state,
or a state that never ran: ``check_run`` returns ``unseen``) and rejected
``unknown_interrupt`` is answered as the unknown thread it was
(``rejection``). The request is still published, and that is the point:
the view can lag the gatekeeper (a thread admitted a moment ago on another
instance), and a legitimate resume of such a thread is admitted by the
gatekeeper, which knows better than the view — only its refusal is
rephrased. (Under lag, the owner's own resume naming a wrong interrupt id
then reads as the 404 rather than the 422; the cost of never refusing a
good resume on a stale view.) Two differences remain, both inherent to
one namespace of thread ids and documented: a POST without resume entries
on an unused id starts a run (on a foreign one: the 404), as does a resume
under the gatekeeper's ``lenient`` policy, which forwards unanswerable
entries; and the unknown id's answer takes a round trip through Kafka
where the foreign one is refused at once.
"""

from __future__ import annotations

import asyncio

from contracts import Decision, ThreadState
from services.consumer.freshness import Freshness
from services.consumer.problems import NotFound, Problem, Rejected, Unavailable
from services.consumer.streams import FanOut
from services.consumer.threads import ThreadView

SETTLE_S = 2.0
"""How long a route waits for the view to show a thread whose run was seen admitted."""
SETTLE_POLL_S = 0.02
BACKSTOP_CODE = "key_mismatch"
"""The gatekeeper's rejection of a request from a principal that does not own the thread."""
NOTHING_OPEN_CODE = "unknown_interrupt"
"""The gatekeeper's rejection of resume entries naming no open interrupt."""


def may_read(state: ThreadState, principal: str, *, enforced: bool) -> bool:
    """Whether ``principal`` may see (state, replay, cancel) the thread."""
    if state.principal is not None:
        return state.principal == principal
    return not enforced


def never_ran(state: ThreadState | None) -> bool:
    """A thread nobody owns yet: no state, or one whose only records are rejections."""
    return state is None or (state.run_id is None and state.principal is None)


def may_run(state: ThreadState | None, principal: str, *, enforced: bool) -> bool:
    """Whether ``principal`` may start or continue a run on the thread."""
    if never_ran(state):
        return True  # a new thread, or one that never ran: the first admitted run claims it
    assert state is not None
    return may_read(state, principal, enforced=enforced)


def unknown_thread(thread_id: str) -> NotFound:
    """The 404 of a thread that does not exist, or is not the caller's."""
    return NotFound("unknown_thread", f"no thread {thread_id!r} is known")


def rejection(decision: Decision, thread_id: str, *, unseen: bool = False) -> Problem:
    """The problem for a rejecting decision, the ownership backstop hidden as a 404.

    ``unseen``: the view showed no run of the thread when the request was
    sent, so resume entries naming nothing open are a resume of an unknown
    thread, answered as one (the module docstring says why).
    """
    if decision.code == BACKSTOP_CODE or (unseen and decision.code == NOTHING_OPEN_CODE):
        return unknown_thread(thread_id)
    return Rejected.from_decision(decision)


class Tenancy:
    """Ownership checks against this instance's thread view."""

    def __init__(self, threads: ThreadView, fanout: FanOut, *, enforced: bool,
                 settle_s: float = SETTLE_S, freshness: Freshness | None = None) -> None:
        self.threads = threads
        self.fanout = fanout
        self.freshness = freshness
        """Read-your-writes for ``readable(fresh=True)``; None: the view as it is."""
        self.enforced = enforced
        """True when API keys are configured (callers are tenants)."""
        self.settle_s = settle_s

    def check_run(self, thread_id: str, principal: str) -> bool:
        """Raise the 404 unless ``principal`` may run on the thread (before publishing).

        Returns whether the thread is ``unseen`` (``never_ran``) in the view.
        """
        state = self.threads.get(thread_id)
        if not may_run(state, principal, enforced=self.enforced):
            raise unknown_thread(thread_id)
        return never_ran(state)

    async def readable(self, thread_id: str, principal: str, run_id: str | None = None, *,
                       fresh: bool = False) -> ThreadState | None:
        """The thread's state for ``principal``; None when the view does not know it.

        Raises the 404 when the thread is another tenant's, and, with
        authentication on, when its owner cannot be established (no state:
        404 once the view has caught up, 503 ``not_ready`` before).
        ``fresh``: a state past every run end this service has streamed
        (``freshness``), waited for only once the caller may read the thread
        (an owner never changes), so another tenant learns nothing from it.
        """
        state = self.threads.get(thread_id)
        if state is None and run_id is not None and (thread_id, run_id) in self.fanout.admitted:
            state = await self._settle(thread_id)
        if state is not None and not may_read(state, principal, enforced=self.enforced):
            raise unknown_thread(thread_id)
        if fresh and self.freshness is not None and (state is not None or not self.enforced):
            state = await self.freshness.settled(thread_id, state)
        if state is None:
            if not self.enforced:
                return None
            if not self.threads.caught_up.is_set():
                raise Unavailable("not_ready", "the service is still reading the thread states")
            raise unknown_thread(thread_id)
        if not may_read(state, principal, enforced=self.enforced):
            raise unknown_thread(thread_id)
        return state

    async def _settle(self, thread_id: str) -> ThreadState | None:
        for _ in range(max(1, round(self.settle_s / SETTLE_POLL_S))):
            state = self.threads.get(thread_id)
            if state is not None:
                return state
            await asyncio.sleep(SETTLE_POLL_S)
        return self.threads.get(thread_id)
