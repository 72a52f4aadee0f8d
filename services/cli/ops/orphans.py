"""Child threads whose parent no longer waits on them: questions nobody is offered.

A delegation's child thread (``ThreadState.parent_run_id``) that ends
interrupted has its interrupts carried up to its parent (the thread id up to
its last ``/``), each naming the child in ``metadata["agui-relay.child"]``;
the inbox and the notifier offer only the parent's copies, and the gatekeeper
refuses an answer sent to the child (``answer_at_parent``). When the parent
is no longer waiting on the child — its run was lost with its worker, or
ended otherwise, before it carried the question up — the child's interrupts
are offered nowhere and answered never: an *orphan*. The parent waits on a
child while it is interrupted on an interrupt naming the child's thread, and
may while it is running (it is carrying the question up, or routing the
answers down, right now). An orphan is cancelled with ``agui-relay resume
--cancel-all -- CHILD`` (a resume that only cancels is what the gatekeeper
still admits on a child), or, when no argument can carry its id (a NUL),
by a resume cancelling each of its interrupts sent over HTTP. Pure: the
caller reads every thread's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ag_ui.core import Interrupt

from contracts import ThreadState
from contracts.records import CHILD_KEY, parent_thread
from services.cli.ops.command_line import command_line

BY_HTTP = ("cancel it with a resume over HTTP: POST /agents/AGENT, its threadId as JSON "
           "escapes it, resume: each open interrupt cancelled")
"""How an orphan no command can name is cancelled: JSON carries a NUL."""


@dataclass(frozen=True, slots=True)
class Orphan:
    """An interrupted child thread its parent no longer waits on."""

    state: ThreadState
    parent: ThreadState | None
    """The parent thread's state (None: the gatekeeper has none)."""

    @property
    def parent_thread(self) -> str:
        return parent_thread(self.state.thread_id)

    @property
    def command(self) -> str | None:
        """What cancels it, the thread id one exact shell word (it is a client's), with
        its invisible characters as escapes; None when no command can name it."""
        return command_line("resume", self.state.thread_id, options=["--cancel-all"])


def child_of(interrupt: Interrupt) -> str | None:
    """The child thread a carried-up interrupt came from (None: it is the thread's own)."""
    metadata = interrupt.metadata
    child = metadata.get(CHILD_KEY) if isinstance(metadata, dict) else None
    thread = child.get("threadId") if isinstance(child, dict) else None
    return thread if isinstance(thread, str) else None


def waits_on(parent: ThreadState | None, child_thread: str) -> bool:
    """True when ``parent`` waits (or may be about to wait) on ``child_thread``."""
    if parent is None:
        return False
    if parent.status == "running":
        return True
    return parent.status == "interrupted" and any(
        child_of(o.interrupt) == child_thread for o in parent.open_interrupts)


def orphans(states: Mapping[str, ThreadState]) -> list[Orphan]:
    """The interrupted child threads among ``states`` (all of them, by thread id) whose
    parent no longer waits on them, by thread id."""
    found = []
    for thread_id, state in sorted(states.items()):
        if state.status != "interrupted" or state.parent_run_id is None:
            continue
        parent = states.get(parent_thread(thread_id))
        if not waits_on(parent, thread_id):
            found.append(Orphan(state, parent))
    return found
