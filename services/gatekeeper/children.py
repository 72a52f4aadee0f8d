"""A delegation's child thread: its interrupts are answered at its parent, never on it.

A child run (``services.producer.delegation``) is admitted with the parent's
run as its ``parentRunId``, which the thread's state keeps
(``ThreadState.parent_run_id``). When it ends interrupted, the parent carries
its interrupts up (namespaced ``<key>/<id>``) and ends interrupted itself; the
person answers there, once, and the parent's resumed run routes the answers
down as the child's next request, with its own run as ``parentRunId``. An
answer sent to the child directly would run the child past its question while
the parent still waits on it, and the parent's own answer, routed down later,
would then be refused: the pipeline is broken. So a request that resolves any
interrupt of an interrupted child is refused ``answer_at_parent`` unless a
delegation made it (``RunRequest.policy == "delegation"``: set by the worker,
never by the consumer service for a client; a client's own ``parentRunId``
proves nothing, and a probe got past the rule with a made-up one). A resume that only
cancels stays allowed: the operator's way out for a child whose parent no
longer waits on it (``agui-relay stuck`` lists such orphans). Pure.
"""

from __future__ import annotations

from contracts.records import RejectionCode, RunRequest, ThreadState, parent_thread


def is_child(state: ThreadState) -> bool:
    """True when the thread's current (or last) run was a delegation's child run."""
    return state.parent_run_id is not None


def refusal(state: ThreadState, request: RunRequest) -> tuple[RejectionCode, str, list[str]] | None:
    """Why ``request`` may not answer the interrupts of ``state`` here (None: it may): the
    code, the message naming the parent thread, and the interrupts it tried to resolve."""
    from_parent = request.policy == "delegation"  # a parent run's routed-down resume
    if state.status != "interrupted" or not is_child(state) or from_parent:
        return None
    resolved = list(dict.fromkeys(e.interrupt_id for e in request.input.resume or ()
                                  if e.status == "resolved"))
    if not resolved:
        return None
    parent = parent_thread(state.thread_id)
    return ("answer_at_parent",
            f"thread {state.thread_id!r} is a child run of thread {parent!r} (run "
            f"{state.parent_run_id!r}), which carried its interrupts up: answer them on "
            f"{parent!r}, whose run routes the answers down; a resume here may only cancel "
            "every open interrupt", resolved)
