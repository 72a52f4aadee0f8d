"""The gatekeeper's rule engine: one request against one thread, decided purely.

``decide(state, request, now, policy)`` returns the thread's new state, the
``Decision`` and, when admitted, the ``Dispatch``. The checks run in the
architecture's order (``invalid_input`` and ``key_mismatch`` need no thread
and are settled earlier, by ``intake``):

0. ownership: a thread belongs to the principal of its first admitted run
   (``ThreadState.principal``); a request from any other principal is
   rejected ``key_mismatch`` — the request names a thread key that is not
   its principal's — before anything else is looked at, so its answer
   tells nothing about the thread (the consumer service turns it into the
   404 of an unknown thread). The rejection changes nothing and is not
   remembered: another principal cannot evict the owner's remembered
   decisions nor learn one by replaying a requestId. A thread without an
   owner is open to any principal, and its next admitted run claims it.
   The consumer service refuses other tenants from its own thread view
   before publishing; this check settles what that view cannot see yet
   (two tenants starting the same new thread id at once);
1. a requestId the thread already decided for the same maker (a client, or
   the same relay policy: ``RunRequest.policy``) gets that decision again, with
   no dispatch and no change (a retry is idempotent; a different runId under
   it is answered so too, and the consumer service refuses that). A client's
   decision never answers a policy's request: one under the expiry policy's
   predictable id is decided on its own, so a client cannot block the policy;
2. a runId equal to the thread's current or a remembered earlier run →
   ``duplicate_run_id``;
3. a running thread → ``thread_busy`` (policy ``reject``), or the request is
   held in ``ThreadState.queued`` and decided when the run closes (policy
   ``enqueue``; ``thread_busy`` when the queue is full);
4. an interrupted thread: a delegation's child answers at its parent
   (``answer_at_parent``: a resume resolving any of its interrupts must
   itself carry a ``parentRunId``, ``children``); the resume list must name
   each open interrupt exactly once (``duplicate_entry``,
   ``unknown_interrupt``, ``uncovered_interrupts``) and may resolve none that
   has expired (``interrupt_expired``; cancelling an expired interrupt is the
   way past);
5. an idle thread with resume entries → ``unknown_interrupt`` (policy
   ``strict``) or admitted with a warning the producer sees (``lenient``).

A request a relay policy made (``RunRequest.policy``: the expiry policy's
resume, ``expiry_policy``) skips 2, 3 and 5: it is admitted only on the very
interruption it names once all of it has expired, else rejected, never
queued behind a run nor forwarded leniently (``expiry_policy.refusal``).

Admission marks the thread running at once, so two resumes racing for the
same interrupts can never both pass, and records the run's ``parentRunId``
(none for a client's run); a dispatch names the thread's previous
run when another agent ran it (``Dispatch.handover``). ``on_boundary``
applies a run boundary from ``events`` and, when it closes the running run,
decides the queued requests in arrival order. Expiry is read exactly as
``@ag-ui/client`` reads it (``services.agui.expiry``): ``expiresAt <= now``
is expired, an unparseable value never expires and the decision says so in a
warning. Pure: ``now`` is an argument.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from typing import Literal

from ag_ui.core import BaseEvent, ResumeEntry

from contracts import (
    Decision,
    Dispatch,
    EventHeaders,
    Handover,
    OpenInterrupt,
    RejectionCode,
    RunRequest,
    ThreadState,
    Verdict,
)
from services.agui.expiry import Expiry, read_expiry
from services.gatekeeper import children, expiry_policy
from services.gatekeeper.answerer import attributed
from services.gatekeeper.thread import (
    Boundary,
    apply_boundary,
    knows_run,
    remember_decision,
    remember_run,
    remembered,
    replayed,
)

BusyPolicy = Literal["reject", "enqueue"]
UnknownEntryPolicy = Literal["strict", "lenient"]


@dataclass(frozen=True, slots=True)
class Policy:
    """How the gatekeeper treats a busy thread and resume entries naming nothing."""

    busy: BusyPolicy = "reject"
    unknown_entry: UnknownEntryPolicy = "strict"
    queue_limit: int = 8
    """Requests a running thread may hold under ``enqueue``; beyond it, ``thread_busy``."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """One decided request: the thread after it, the verdict, the dispatch if admitted."""

    state: ThreadState
    decision: Decision
    dispatch: Dispatch | None = None


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A verdict before it is stamped with the request's ids and the clock."""

    verdict: Verdict
    message: str
    code: RejectionCode | None = None
    interrupt_ids: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def decide(state: ThreadState, request: RunRequest, now: datetime, policy: Policy) -> Outcome:
    """Decide ``request`` on the thread ``state`` (whose id must be the input's threadId)."""
    if request.input.thread_id != state.thread_id:
        raise ValueError(
            f"request for thread {request.input.thread_id!r} decided against {state.thread_id!r}"
        )
    foreign = _foreign(state, request, now)
    if foreign is not None:
        return foreign
    for past in state.recent_decisions:
        if past.request_id == request.request_id and past.policy == request.policy:
            return Outcome(state, replayed(past, state, request))
    return _judge(state, request, now, policy)


Check = Callable[[Outcome], str | None]
"""Why an admission's records could not be written (None: they can); pure, like the rules."""


def on_boundary(
    state: ThreadState, boundary: Boundary, now: datetime, policy: Policy,
    check: Check | None = None,
) -> tuple[ThreadState, list[Outcome]]:
    """Apply a run boundary; when it closes the run, decide what was queued behind it."""
    after = apply_boundary(state, boundary, now)
    if after is state:
        return state, []
    after = after.model_copy(update={"updated_at": now})
    return drain(after, now, policy, check)


def on_event(
    state: ThreadState, headers: EventHeaders, event: BaseEvent, now: datetime, policy: Policy
) -> tuple[ThreadState, list[Outcome]]:
    """``on_boundary`` for a decoded event record; other event types change nothing."""
    boundary = Boundary.of(headers, event)
    return (state, []) if boundary is None else on_boundary(state, boundary, now, policy)


def drain(
    state: ThreadState, now: datetime, policy: Policy, check: Check | None = None
) -> tuple[ThreadState, list[Outcome]]:
    """Decide queued requests in arrival order until one is admitted or none is left.

    ``check``: an admission whose records it says cannot be written (its
    dispatch would outgrow a record) is rejected ``invalid_input`` with its
    reason instead, and the next queued request is decided.
    """
    outcomes: list[Outcome] = []
    while state.status != "running" and state.queued:
        request = state.queued[0]
        state = state.model_copy(update={"queued": state.queued[1:]})
        outcome = _foreign(state, request, now) or _judge(state, request, now, policy)
        why = check(outcome) if check is not None and outcome.dispatch is not None else None
        if why is not None:
            outcome = _reject(state, request, now, _Verdict("rejected", why, "invalid_input"))
        outcomes.append(outcome)
        state = outcome.state
    return state, outcomes


def _foreign(state: ThreadState, request: RunRequest, now: datetime) -> Outcome | None:
    """Step 0: the rejection of a request whose principal does not own the thread."""
    if state.principal is None or request.principal == state.principal:
        return None
    verdict = _Verdict(
        "rejected",
        f"thread {state.thread_id!r} belongs to another principal; a request may continue "
        "only the threads its principal started",
        "key_mismatch",
    )
    return Outcome(state, _decision(state, request, now, verdict))


def _judge(state: ThreadState, request: RunRequest, now: datetime, policy: Policy) -> Outcome:
    if request.policy == "expiry":  # the expiry policy's own request: never queued nor lenient
        return _by_policy(state, request, now)
    late = expiry_policy.late_answer(state, (e.interrupt_id for e in request.input.resume or ()))
    if late is not None:
        return _reject(state, request, now, _Verdict("rejected", late[1], late[0]))
    run_id = request.input.run_id
    if knows_run(state, run_id):
        return _reject(
            state,
            request,
            now,
            _Verdict(
                "rejected",
                f"runId {run_id!r} was already used on thread {state.thread_id!r}; "
                "every run needs a new runId",
                "duplicate_run_id",
            ),
        )
    if state.status == "running":
        return _busy(state, request, now, policy)
    if state.status == "interrupted":
        child = children.refusal(state, request)
        if child is not None:
            return _reject(state, request, now, _Verdict("rejected", child[1], child[0],
                                                         tuple(child[2])))
        verdict = _resume_verdict(state, request.input.resume or [], now)
    else:
        verdict = _idle_verdict(state, request.input.resume or [], policy)
    if verdict.verdict == "admitted":
        return _admit(state, request, now, verdict)
    return _reject(state, request, now, verdict)


def _by_policy(state: ThreadState, request: RunRequest, now: datetime) -> Outcome:
    """The expiry policy's resume: admitted only on the interruption it names, all lapsed."""
    refused = expiry_policy.refusal(state, request, now)
    if refused is not None:
        return _reject(state, request, now, _Verdict("rejected", refused[1], refused[0]))
    verdict = _resume_verdict(state, request.input.resume or [], now)
    if verdict.verdict != "admitted":
        return _reject(state, request, now, verdict)
    return _admit(state, request, now, replace(verdict,
                                               message=expiry_policy.admitted_message(state)))


def _busy(state: ThreadState, request: RunRequest, now: datetime, policy: Policy) -> Outcome:
    running = f"thread {state.thread_id!r} is running run {state.run_id!r}"
    if policy.busy == "reject":
        return _reject(
            state,
            request,
            now,
            _Verdict("rejected", f"{running}; send again when it has finished", "thread_busy"),
        )
    if len(state.queued) >= policy.queue_limit:
        return _reject(
            state,
            request,
            now,
            _Verdict(
                "rejected",
                f"{running} and its queue is full ({len(state.queued)} of {policy.queue_limit} "
                "requests waiting); send again when it has finished",
                "thread_busy",
            ),
        )
    verdict = _Verdict(
        "queued",
        f"{running}; queued at position {len(state.queued) + 1}, to be decided when it finishes",
    )
    decision = _decision(state, request, now, verdict)
    new_state = state.model_copy(
        update={
            "queued": [*state.queued, request],
            "recent_decisions": remember_decision(state.recent_decisions, remembered(decision)),
            "updated_at": now,
        }
    )
    return Outcome(new_state, decision)


def _resume_verdict(state: ThreadState, entries: list[ResumeEntry], now: datetime) -> _Verdict:
    """The interrupt rules for a request on an interrupted thread."""
    opened = {o.interrupt.id: o for o in state.open_interrupts}
    warnings = tuple(_unparseable_warnings(state.open_interrupts))
    waiting = f"run {state.interrupted_run_id!r} is waiting on {_ids(opened)}"

    def refuse(code: RejectionCode, ids: list[str], message: str) -> _Verdict:
        return _Verdict("rejected", message, code, tuple(ids), warnings)

    counts = Counter(e.interrupt_id for e in entries)
    duplicated = [i for i, n in counts.items() if n > 1]
    if duplicated:
        return refuse(
            "duplicate_entry",
            duplicated,
            f"resume answers {_ids(duplicated)} more than once; each open "
            "interrupt takes exactly one entry",
        )
    unknown = [i for i in counts if i not in opened]
    if unknown:
        return refuse(
            "unknown_interrupt",
            unknown,
            f"resume names {_ids(unknown)}, not open on thread {state.thread_id!r}; {waiting}",
        )
    uncovered = [i for i in opened if i not in counts]
    if uncovered:
        if not entries:
            return refuse(
                "uncovered_interrupts",
                uncovered,
                f"thread {state.thread_id!r} is interrupted: {waiting}; a new run "
                "must resume it with an entry for each",
            )
        return refuse(
            "uncovered_interrupts",
            uncovered,
            f"resume leaves {_ids(uncovered)} uncovered; answer each (resolved) or "
            "abandon it (cancelled): omission is not abandonment",
        )
    expired = [
        e.interrupt_id
        for e in entries
        if e.status == "resolved" and _expiry(opened[e.interrupt_id]).is_expired(now)
    ]
    if expired:
        when = ", ".join(f"{i} at {opened[i].interrupt.expires_at}" for i in expired)
        return refuse(
            "interrupt_expired",
            expired,
            f"expired interrupts can no longer be answered ({when}); cancel them "
            "to continue the thread",
        )
    resolved = sum(1 for e in entries if e.status == "resolved")
    return _Verdict(
        "admitted",
        f"resumes run {state.interrupted_run_id!r}: {resolved} resolved, "
        f"{len(entries) - resolved} cancelled",
        None,
        tuple(opened),
        warnings,
    )


def _idle_verdict(state: ThreadState, entries: list[ResumeEntry], policy: Policy) -> _Verdict:
    """A request on an idle thread: any resume entry answers nothing."""
    if not entries:
        return _Verdict("admitted", f"new run on idle thread {state.thread_id!r}")
    named = list(dict.fromkeys(e.interrupt_id for e in entries))
    nothing_open = f"thread {state.thread_id!r} has no open interrupts"
    if policy.unknown_entry == "strict":
        return _Verdict(
            "rejected",
            f"resume names {_ids(named)} but {nothing_open}",
            "unknown_interrupt",
            tuple(named),
        )
    return _Verdict(
        "admitted",
        f"new run on idle thread {state.thread_id!r}, resume entries forwarded",
        None,
        tuple(named),
        (
            f"resume entries {_ids(named)} answer nothing: {nothing_open}; forwarded as "
            "unrecognised (lenient policy)",
        ),
    )


def _admit(state: ThreadState, request: RunRequest, now: datetime, verdict: _Verdict) -> Outcome:
    decision = _decision(state, request, now, verdict)
    new_state = state.model_copy(
        update={
            "status": "running",
            "run_id": request.input.run_id,
            # a delegation's child only: a client's own parentRunId (a run it spawned
            # itself, as AG-UI lets it say) makes no thread a child answered elsewhere
            "parent_run_id": (request.input.parent_run_id if request.policy == "delegation"
                              else None),
            "agent": request.agent,
            "principal": request.principal,
            "open_interrupts": [],
            "lapsed": ([o.interrupt.id for o in state.open_interrupts]
                       if request.policy == "expiry" else state.lapsed),
            "recent_run_ids": remember_run(state.recent_run_ids, request.input.run_id),
            "recent_decisions": remember_decision(state.recent_decisions, remembered(decision)),
            "run_started_at": now,
            "updated_at": now,
        }
    )
    dispatch = Dispatch(
        request_id=request.request_id,
        agent=request.agent,
        input=attributed(request),
        submitted_at=request.submitted_at,
        principal=request.principal,
        key_name=request.key_name,
        policy=request.policy,
        warnings=list(verdict.warnings) or None,
        handover=_handover(state, request),
        decided_at=now,
    )
    return Outcome(new_state, decision, dispatch)


def _handover(state: ThreadState, request: RunRequest) -> Handover | None:
    """The thread's previous run when another agent ran it (its workers wrote the
    thread's checkpoint last, and may be other processes than this run's)."""
    if state.run_id is None or state.agent is None or state.agent == request.agent:
        return None
    return Handover(run_id=state.run_id, agent=state.agent)


def _reject(state: ThreadState, request: RunRequest, now: datetime, verdict: _Verdict) -> Outcome:
    decision = _decision(state, request, now, verdict)
    new_state = state.model_copy(
        update={
            "recent_decisions": remember_decision(state.recent_decisions, remembered(decision)),
            "updated_at": now,
        }
    )
    return Outcome(new_state, decision)


def _decision(state: ThreadState, request: RunRequest, now: datetime, v: _Verdict) -> Decision:
    return Decision(
        request_id=request.request_id,
        thread_id=state.thread_id,
        run_id=request.input.run_id,
        agent=request.agent,
        verdict=v.verdict,
        code=v.code,
        message=v.message,
        interrupt_ids=list(v.interrupt_ids) or None,
        warnings=list(v.warnings) or None,
        principal=request.principal,
        key_name=request.key_name,
        policy=request.policy,
        decided_at=now,
    )


@lru_cache(maxsize=4096)
def _read(expires_at: str | None) -> Expiry:
    return read_expiry(expires_at)


def _expiry(opened: OpenInterrupt) -> Expiry:
    return _read(opened.interrupt.expires_at)


def _unparseable_warnings(opened: Iterable[OpenInterrupt]) -> Iterable[str]:
    for o in opened:
        if _expiry(o).unparseable:
            yield (
                f"interrupt {o.interrupt.id} has expiresAt {o.interrupt.expires_at!r}, "
                "which does not read as a date: it never expires"
            )


def _ids(ids: Iterable[str]) -> str:
    listed = list(ids)
    noun = "interrupt" if len(listed) == 1 else "interrupts"
    return f"{noun} {', '.join(listed)}"
