"""JSON bodies of the non-streaming routes (camelCase, optionals omitted).

Built on the ag-ui base model so they serialise like every other wire
object of the project; AG-UI's own ``Interrupt`` is embedded as it is.
"""

from __future__ import annotations

from datetime import datetime

from ag_ui.core import Interrupt
from ag_ui.core.types import ConfiguredBaseModel
from pydantic import ConfigDict

from contracts import ThreadState, ThreadStatus


class View(ConfiguredBaseModel):
    """Base of the response bodies: ours, so unknown members are not kept."""

    model_config = ConfigDict(extra="ignore")


class OpenInterruptView(View):
    """An interrupt still waiting for an answer."""

    run_id: str
    """The run that raised it: the run a resume continues."""
    interrupt: Interrupt
    expires_at: str | None = None
    """The interrupt's ``expiresAt`` as the producer wrote it (format unconstrained)."""


class ThreadView(View):
    """``GET /threads/{threadId}``: what the gatekeeper last recorded of a thread."""

    thread_id: str
    status: ThreadStatus
    agent: str | None = None
    current_run_id: str | None = None
    """The run in progress (status ``running``)."""
    last_run_id: str | None = None
    """The most recent run (running or closed)."""
    interrupted_run_id: str | None = None
    open_interrupts: list[OpenInterruptView]
    queued_requests: int = 0
    run_started_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def of(cls, state: ThreadState) -> ThreadView:
        return cls(
            thread_id=state.thread_id,
            status=state.status,
            agent=state.agent,
            current_run_id=state.run_id if state.status == "running" else None,
            last_run_id=state.run_id,
            interrupted_run_id=state.interrupted_run_id,
            open_interrupts=[
                OpenInterruptView(run_id=o.run_id, interrupt=o.interrupt,
                                  expires_at=o.interrupt.expires_at)
                for o in state.open_interrupts
            ],
            queued_requests=len(state.queued),
            run_started_at=state.run_started_at,
            updated_at=state.updated_at,
        )


class CancelAccepted(View):
    """``POST .../cancel``: the ControlCommand was published."""

    thread_id: str
    run_id: str
    requested_by: str
    requested_at: datetime
