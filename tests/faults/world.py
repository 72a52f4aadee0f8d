"""Hand-built topic contents for the checker's own tests.

``World`` writes the records a correct deployment would commit — requests,
decisions, dispatches, events with their headers, thread states, dead
letters — as ``Rec`` values, so a test can build a history, break one thing
and see the checker name it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson
from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from contracts import (
    DeadLetter,
    Decision,
    Dispatch,
    EventHeaders,
    RejectionCode,
    RunRequest,
    ThreadState,
    ThreadStatus,
    Verdict,
    encode,
    encode_event,
)
from faults.checker import BOUNDARY_TYPES, Rec, Records

NOW = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass
class World:
    """An append-only set of topics, one partition each (enough for the judge)."""

    records: Records = field(default_factory=lambda: Records(requests_topic="t.requests"))
    seqs: dict[tuple[str, str], int] = field(default_factory=dict)

    def _append(self, target: list[Rec], topic: str, key: str | None, value: bytes | None,
                headers: tuple[tuple[str, bytes], ...] = ()) -> Rec:
        rec = Rec(topic, 0, len(target), key.encode() if key is not None else None, value,
                  headers, len(target))
        target.append(rec)
        return rec

    def request(self, thread_id: str, run_id: str, request_id: str, agent: str = "scripted",
                resume: list[dict[str, object]] | None = None) -> RunRequest:
        wire: dict[str, object] = {"threadId": thread_id, "runId": run_id, "messages": [],
                                   "tools": [], "context": [], "state": {},
                                   "forwardedProps": {}}
        if resume is not None:
            wire["resume"] = resume
        req = RunRequest(request_id=request_id, agent=agent,
                         input=RunAgentInput.model_validate(wire), submitted_at=NOW)
        self._append(self.records.requests, "t.requests", thread_id, encode(req))
        return req

    def raw_request(self, value: bytes | None, key: str | None = None) -> Rec:
        return self._append(self.records.requests, "t.requests", key, value)

    def decide(self, thread_id: str, run_id: str | None, request_id: str,
               verdict: Verdict = "admitted", code: RejectionCode | None = None) -> None:
        decision = Decision(request_id=request_id, thread_id=thread_id, run_id=run_id,
                            verdict=verdict, code=code, message=verdict, decided_at=NOW)
        self._append(self.records.decisions, "t.decisions", thread_id, encode(decision))

    def dispatch(self, req: RunRequest) -> None:
        dispatch = Dispatch(request_id=req.request_id, agent=req.agent, input=req.input,
                            submitted_at=NOW, decided_at=NOW)
        self._append(self.records.dispatches, f"t.dispatch.{req.agent}", req.input.thread_id,
                     encode(dispatch))

    def admit(self, thread_id: str, run_id: str, request_id: str) -> RunRequest:
        """A request, its admission and its dispatch."""
        req = self.request(thread_id, run_id, request_id)
        self.decide(thread_id, run_id, request_id)
        self.dispatch(req)
        return req

    def event(self, thread_id: str, run_id: str, event: BaseEvent, seq: int | None = None,
              headers: bool = True, boundary: bool = True) -> None:
        """One event on ``events``; a boundary on ``runs`` too (unless not ``boundary``)."""
        if seq is None:
            seq = self.seqs.get((thread_id, run_id), 0)
        self.seqs[(thread_id, run_id)] = seq + 1
        kind = str(event.type.value if hasattr(event.type, "value") else event.type)
        encoded = tuple(EventHeaders(run_id, kind, "scripted", seq).encode()) if headers else ()
        value = encode_event(event)
        if boundary and headers and kind in BOUNDARY_TYPES:
            self._append(self.records.runs, "t.runs", thread_id, value, encoded)
        self._append(self.records.events, "t.events", thread_id, value, encoded)

    def run(self, thread_id: str, run_id: str, ending: str = "success") -> None:
        """A whole run's events: started, one text message, and ``ending``."""
        self.event(thread_id, run_id, RunStartedEvent(thread_id=thread_id, run_id=run_id))
        self.event(thread_id, run_id, TextMessageStartEvent(message_id="m", role="assistant"))
        self.event(thread_id, run_id, TextMessageContentEvent(message_id="m", delta="hi"))
        self.event(thread_id, run_id, TextMessageEndEvent(message_id="m"))
        if ending == "success":
            self.event(thread_id, run_id, finished(thread_id, run_id))
        elif ending == "interrupt":
            self.event(thread_id, run_id, finished(thread_id, run_id, ["i1"]))
        elif ending == "error":
            self.event(thread_id, run_id, RunErrorEvent(message="boom", code="x"))

    def state(self, thread_id: str, status: ThreadStatus = "idle", run_id: str | None = None,
              queued: list[RunRequest] | None = None) -> None:
        state = ThreadState(thread_id=thread_id, status=status, run_id=run_id,
                            queued=queued or [], updated_at=NOW)
        self._append(self.records.threads, "t.threads", thread_id, encode(state))

    def dead_letter(self, source: Rec, code: str = "invalid_json") -> None:
        letter = DeadLetter(source_topic=source.topic, partition=source.partition,
                            offset=source.offset, value="", reason=code, code=code,
                            service="gatekeeper", failed_at=NOW)
        self._append(self.records.deadletters, "t.deadletter", None, encode(letter))


def finished(thread_id: str, run_id: str, interrupts: list[str] | None = None) -> RunFinishedEvent:
    if not interrupts:
        return RunFinishedEvent(thread_id=thread_id, run_id=run_id)
    outcome = RunFinishedInterruptOutcome(
        type="interrupt", interrupts=[Interrupt(id=i, reason="input_required") for i in interrupts]
    )
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, outcome=outcome)


def raw(obj: object) -> bytes:
    return orjson.dumps(obj)
