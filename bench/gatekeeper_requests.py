"""What every phase of the gatekeeper benchmark sends, and where.

A RunRequest on a thread of its own for the ``scripted`` agent (so each is
admitted: a decision, a dispatch and a thread state), the partition count
every phase's topics are made with, and the repository root the benchmark's
processes run in and its results are written under. Shared by the phases in
``bench.gatekeeper*`` and by ``bench.relay_floor``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ag_ui.core import ResumeEntry, RunAgentInput, UserMessage

from contracts import RunRequest

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 8
AGENT = "scripted"


def request(thread: str, run: str, resume: list[ResumeEntry] | None = None) -> RunRequest:
    return RunRequest(
        request_id=f"{thread}-{run}",
        agent=AGENT,
        input=RunAgentInput(
            thread_id=thread,
            run_id=run,
            resume=resume,
            messages=[UserMessage(id=f"m-{run}", role="user", content="Delete the old logs.")],
        ),
        submitted_at=datetime.now(UTC),
    )
