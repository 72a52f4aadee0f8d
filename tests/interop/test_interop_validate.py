"""ag-ui-validate's live transport check of every sample agent through the relay.

Each agent is run fresh and then resumed (its interrupts answered) through
``POST /agents/{agent}``; ``ag_ui_validate.transport.validate_endpoint``
checks each stream as it arrives — SSE framing, content type, lifecycle,
tool calls, subagents — and every event is parsed with the ag-ui-protocol
models too.

Rules switched off: none. The validator's catalog is written against AG-UI
0.x (digest §11) and three of its rules disagree with 1.0 — AGUI005 (a late
RUN_ERROR after RUN_FINISHED, allowed by 1.0), AGUI001 (a stream opening
with RUN_ERROR, allowed by 1.0) and AGUI207 (a tool result in a resumed run
for a call the interrupted run opened) — but the relay's streams never
trigger them: the POST stream closes at the first terminal event, no sample
opens with RUN_ERROR, and the approval agent restates history with
MESSAGES_SNAPSHOT before its tool result. ``OFF`` stays empty, and the test
fails if any of them fires.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from ag_ui_validate.transport import TransportOptions, validate_endpoint
from ag_ui_validate.types import ValidatorOptions
from relay_system import RelaySystem

from contracts import EVENT_DECODER

pytestmark = pytest.mark.interop

OFF: dict[str, str] = {}
"""Rules switched off, with the spec reason (see the module docstring): none needed."""


def fresh_input(thread: str, forwarded: Any = None) -> dict[str, Any]:
    return {"threadId": thread, "runId": f"{thread}-1", "protocolVersion": "1.0",
            "state": {}, "tools": [], "context": [], "forwardedProps": forwarded or {},
            "messages": [{"id": f"{thread}-u1", "role": "user", "content": "Go ahead."}]}


async def validated(system: RelaySystem, agent: str, run_input: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """Validate one live run; return its events (each parsed with the protocol models)."""
    raw: list[str] = []
    result = await validate_endpoint(f"{system.url}/agents/{agent}", TransportOptions(
        input=run_input, timeout_ms=60_000, keepalive_window_ms=30_000,
        validator=ValidatorOptions(severity_overrides=OFF or None),
        on_event=lambda data, _: raw.append(data)))
    report = result.report
    findings = [f"{d.rule} {d.severity}: {d.message}" for d in report.diagnostics
                if d.severity in ("error", "warning")]
    assert result.status == 200, f"{agent}: HTTP {result.status}\n{system.logs()}"
    assert result.transport_error is None
    assert report.internal_errors == []
    assert findings == [], f"{agent}: {findings}"
    assert result.content_type is not None
    assert result.content_type.startswith("text/event-stream")
    events = [orjson.loads(data) for data in raw]
    for data in raw:
        EVENT_DECODER.validate_json(data)
    return events


def accumulated(messages: list[dict[str, Any]], events: list[dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """The conversation after ``events``, as a client keeps it (text and tool calls)."""
    out = [dict(m) for m in messages]
    by_id = {m["id"]: m for m in out}
    for event in events:
        kind = event["type"]
        if kind == "MESSAGES_SNAPSHOT":
            out = [dict(m) for m in event["messages"]]
            by_id = {m["id"]: m for m in out}
        elif kind == "TEXT_MESSAGE_START":
            by_id[event["messageId"]] = {"id": event["messageId"], "role": "assistant",
                                         "content": ""}
            out.append(by_id[event["messageId"]])
        elif kind == "TEXT_MESSAGE_CONTENT":
            by_id[event["messageId"]]["content"] += event["delta"]
        elif kind == "TOOL_CALL_START":
            parent_id = event.get("parentMessageId") or event["toolCallId"]
            if parent_id not in by_id:
                by_id[parent_id] = {"id": parent_id, "role": "assistant"}
                out.append(by_id[parent_id])
            by_id[parent_id].setdefault("toolCalls", []).append(
                {"id": event["toolCallId"], "type": "function",
                 "function": {"name": event["toolCallName"], "arguments": ""}})
            by_id[event["toolCallId"]] = by_id[parent_id]["toolCalls"][-1]
        elif kind == "TOOL_CALL_ARGS":
            by_id[event["toolCallId"]]["function"]["arguments"] += event["delta"]
    return [m for m in out if "role" in m]


def resume_input(first: dict[str, Any], events: list[dict[str, Any]],
                 answer: dict[str, Any]) -> dict[str, Any]:
    """The next run's input: same thread, new runId, history kept, every interrupt answered."""
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt", events[-1]
    return {**first, "runId": f"{first['threadId']}-2",
            "messages": accumulated(first["messages"], events),
            "resume": [{"interruptId": i["id"], **answer} for i in outcome["interrupts"]]}


@pytest.mark.parametrize(
    ("agent", "forwarded", "answer"),
    [
        ("approval", None, {"status": "resolved", "payload": {"approved": True}}),
        ("approval", None, {"status": "resolved", "payload": {"approved": False}}),
        ("scripted", {"script": {"text": "Need two answers.", "interrupts": [
            {"id": "s1", "reason": "choice", "message": "Pick one"},
            {"id": "s2", "reason": "confirm",
             "expiresAt": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}]}},
         {"status": "resolved", "payload": {"ok": True}}),
        ("scripted", {"script": {"interrupts": [
            {"id": "old", "reason": "confirm", "expiresAt": "2001-01-01T00:00:00Z"}]}},
         {"status": "cancelled"}),
        ("planner", None, {"status": "resolved", "payload": {"approved": True}}),
    ],
    ids=["approval-yes", "approval-no", "scripted-two", "scripted-expired", "planner"],
)
async def test_fresh_and_resumed_runs_validate(system: RelaySystem, agent: str,
                                               forwarded: Any, answer: dict[str, Any]) -> None:
    first = fresh_input(f"val-{agent}-{uuid.uuid4().hex[:8]}", forwarded)
    events = await validated(system, agent, first)
    assert events[0]["type"] == "RUN_STARTED"
    resumed = await validated(system, agent, resume_input(first, events, answer))
    assert resumed[0]["type"] == "RUN_STARTED"
    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert resumed[-1].get("outcome", {"type": "success"}) == {"type": "success"}


@pytest.mark.parametrize("script", [{"text": "All done."}, {"fail": "it broke"}],
                         ids=["success", "run-error"])
async def test_runs_without_interrupts_validate(system: RelaySystem,
                                                script: dict[str, Any]) -> None:
    events = await validated(system, "scripted",
                             fresh_input(f"val-plain-{uuid.uuid4().hex[:8]}", {"script": script}))
    assert events[-1]["type"] == ("RUN_ERROR" if "fail" in script else "RUN_FINISHED")
