"""Thread states as the gatekeeper writes them, for the notifier's pure tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ag_ui.core import Interrupt

from contracts import OpenInterrupt, RememberedDecision, ThreadState, ThreadStatus

T0 = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
SCOPE = "agui.threads"


def ms(moment: datetime) -> int:
    return int((moment - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(milliseconds=1))


def interrupt(interrupt_id: str, expires_at: str | None = None) -> Interrupt:
    return Interrupt(id=interrupt_id, reason="tool_approval", message=f"approve {interrupt_id}?",
                     expires_at=expires_at)


def state(status: ThreadStatus = "idle", *opened: tuple[str, Interrupt],
          updated_at: datetime = T0, decisions: list[RememberedDecision] | None = None,
          thread_id: str = "t1") -> ThreadState:
    return ThreadState(
        thread_id=thread_id, status=status, agent="approval", principal="acme",
        run_id=opened[0][0] if opened else "r0",
        interrupted_run_id=opened[0][0] if opened else None,
        open_interrupts=[OpenInterrupt(run_id=r, interrupt=i) for r, i in opened],
        recent_decisions=decisions or [], updated_at=updated_at)


def interrupted(*opened: tuple[str, Interrupt], updated_at: datetime = T0,
                thread_id: str = "t1") -> ThreadState:
    return state("interrupted", *opened, updated_at=updated_at, thread_id=thread_id)


def admitted(request_id: str, run_id: str, *ids: str, at: datetime = T0) -> RememberedDecision:
    return RememberedDecision(request_id=request_id, run_id=run_id, verdict="admitted",
                              message=f"resumes: {len(ids)} answered", interrupt_ids=list(ids),
                              decided_at=at)
