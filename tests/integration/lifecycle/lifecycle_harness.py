"""Helpers of the lifecycle tests: requests as the consumer service writes them, and
waiting for a run to end interrupted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ag_ui.core import ResumeEntry, RunAgentInput, UserMessage
from gatekeeper_harness import Topics
from producer_harness import Relay

from contracts import Decision, RunRequest


def request(request_id: str, thread_id: str, run_id: str, agent: str, *,
            principal: str = "alice", resume: list[ResumeEntry] | None = None,
            props: Any = None, key_name: str | None = None) -> RunRequest:
    return RunRequest(request_id=request_id, agent=agent, principal=principal,
                      key_name=key_name,
                      submitted_at=datetime.now(UTC), input=RunAgentInput(
                          thread_id=thread_id, run_id=run_id, resume=resume,
                          messages=[UserMessage(id=f"u-{run_id}", content="please")],
                          forwarded_props=props))


def admitted(topics: Topics, thread_id: str) -> list[Decision]:
    """The thread's admitted requests, each once (a repeated request id is answered
    with the decision it already got: the same verdict again, never a dispatch)."""
    return [ds[0] for ds in topics.decisions.values()
            if ds[0].thread_id == thread_id and ds[0].verdict == "admitted"]


async def interrupted(topics: Topics, events: Relay, thread_id: str,
                      run_id: str) -> list[dict[str, Any]]:
    """Wait for the run to end interrupted and the gatekeeper to commit it; its interrupts."""
    view = await events.finished(run_id, 60)
    assert view.outcome["type"] == "interrupt", view.terminal
    await topics.until(lambda: (s := topics.threads.get(thread_id)) is not None
                       and s.status == "interrupted", 30, f"{thread_id} interrupted")
    return list(view.outcome["interrupts"])
