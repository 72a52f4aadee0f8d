"""Pretty lines for the terminal: one coloured line per record, interrupts expanded.

Pure (``now`` is passed in, no I/O): each function turns an ``OpsRecord``
or an interrupt into ``rich.text.Text``. A line reads
``time  thread  run  TYPE  detail``; times are UTC. An interrupt outcome is
followed by one line per interrupt with its id, reason, message and the
time left before it expires, read exactly as the gatekeeper reads
``expiresAt`` (``services.agui.expiry``) so the two never disagree
about what has expired. Rejections show their code. A line's thread, run
and interrupt ids are one word each (``safe_id``), so none passes for
another field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.text import Text

from contracts.headers import AGENT, EVENT_TYPE, RUN_ID
from services.agui.expiry import read_expiry
from services.agui.jsdate import to_epoch_ms
from services.cli.ops.safe import safe, safe_id
from services.kafka.records import OpsRecord

DETAIL_MAX = 96
TYPE_WIDTH = 22

_EVENT_STYLES = {
    "RUN_STARTED": "bold cyan",
    "RUN_ERROR": "bold red",
    "TEXT_MESSAGE_START": "white",
    "TEXT_MESSAGE_CONTENT": "white",
    "TEXT_MESSAGE_END": "white",
    "TEXT_MESSAGE_CHUNK": "white",
    "TOOL_CALL_START": "blue",
    "TOOL_CALL_ARGS": "blue",
    "TOOL_CALL_END": "blue",
    "TOOL_CALL_CHUNK": "blue",
    "TOOL_CALL_RESULT": "bold blue",
    "STATE_SNAPSHOT": "dim",
    "STATE_DELTA": "dim",
    "MESSAGES_SNAPSHOT": "dim",
    "CUSTOM": "magenta",
}
_OUTCOME_STYLES = {"interrupt": "bold yellow", "cancelled": "bold magenta"}
_VERDICT_STYLES = {"admitted": "bold green", "rejected": "bold red", "queued": "bold yellow"}


def clip(text: str, limit: int = DETAIL_MAX) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = safe(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def compact_json(value: Any) -> str:
    """A JSON value on one line."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def duration(seconds: float) -> str:
    """``42s``, ``3m``, ``3m 12s``, ``2h 5m``, ``3d 4h``: the two largest units."""
    whole = int(abs(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count or (unit == "s" and not parts):
            parts.append(f"{count}{unit}")
        if len(parts) == 2:
            break
    if len(parts) == 2 and parts[1].startswith("0"):
        parts.pop()
    return " ".join(parts)


def time_left(expires_at: str | None, now: datetime) -> str:
    """How an interrupt's expiry reads now: ``expires in 4m 59s``, ``expired 3m ago``..."""
    if expires_at is None:
        return "no expiry"
    expiry = read_expiry(expires_at)
    if expiry.epoch_ms is None:
        return f"never expires (unparseable expiresAt {safe(repr(expires_at))})"
    delta_s = (expiry.epoch_ms - to_epoch_ms(now)) / 1000
    if expiry.is_expired(now):
        return f"expired {duration(delta_s)} ago"
    return f"expires in {duration(delta_s)}"


def clock(timestamp_ms: int) -> str:
    """``HH:MM:SS.mmm`` in UTC."""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def interrupt_line(interrupt: Mapping[str, Any], now: datetime, indent: str = "    ") -> Text:
    """``⏸ interrupt ID  reason=R  "message"  expires in ...`` for one interrupt."""
    line = Text(indent)
    line.append("⏸ interrupt ", style="yellow")
    line.append(safe_id(interrupt.get("id")), style="bold yellow")
    line.append(f"  reason={safe(interrupt.get('reason'))}")
    if interrupt.get("message"):
        line.append(f"  “{clip(str(interrupt['message']), 80)}”", style="italic")
    expires = interrupt.get("expiresAt")
    left = time_left(expires if isinstance(expires, str) else None, now)
    line.append(f"  {left}", style="red" if left.startswith("expired") else "green")
    if interrupt.get("toolCallId"):
        line.append(f"  tool={safe(interrupt['toolCallId'])}", style="dim")
    if interrupt.get("subagentRunId"):
        line.append(f"  subagent={safe(interrupt['subagentRunId'])}", style="dim")
    return line


def _head(rec: OpsRecord, run: str, label: str, style: str) -> Text:
    line = Text()
    line.append(clock(rec.timestamp_ms), style="dim")
    line.append(f"  {safe_id(rec.key or '-')}", style="bold")
    line.append(f"  {safe_id(run or '-')}", style="cyan")
    line.append(f"  {safe(label):<{TYPE_WIDTH}}", style=style)
    return line


def _event_detail(kind: str, body: Mapping[str, Any]) -> tuple[str, str | None]:
    """The short detail of one event, and a style override for the type label."""
    if kind == "RUN_STARTED":
        parts = []
        given = body.get("input") if isinstance(body.get("input"), dict) else {}
        if body.get("parentRunId"):
            parts.append(f"parent={body['parentRunId']}")
        resume = given.get("resume") if isinstance(given, dict) else None
        if resume:
            parts.append("resume " + ", ".join(
                f"{e.get('interruptId')}={e.get('status')}" for e in resume if isinstance(e, dict)))
        if isinstance(given, dict) and isinstance(given.get("messages"), list):
            parts.append(f"{len(given['messages'])} messages in")
        return "  ".join(parts), None
    if kind == "RUN_FINISHED":
        outcome = body.get("outcome") if isinstance(body.get("outcome"), dict) else {}
        assert isinstance(outcome, dict)
        kind_of = str(outcome.get("type", "success"))
        detail = kind_of
        if kind_of == "interrupt":
            detail = f"interrupt ({len(outcome.get('interrupts') or [])})"
        elif kind_of == "success" and outcome.get("pendingToolCallIds"):
            detail = f"success, pending tools {', '.join(outcome['pendingToolCallIds'])}"
        return detail, _OUTCOME_STYLES.get(kind_of, "bold green")
    if kind == "RUN_ERROR":
        return f"{body.get('code') or 'error'}: {clip(str(body.get('message', '')))}", None
    if kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT", "TOOL_CALL_ARGS",
                "TEXT_MESSAGE_CHUNK", "TOOL_CALL_CHUNK"):
        return repr(clip(str(body.get("delta", "")), 80)), None
    if kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START"):
        return f"{body.get('role', 'assistant')} {body.get('messageId', '')}", None
    if kind == "TOOL_CALL_START":
        return f"{body.get('toolCallName')} {body.get('toolCallId')}", None
    if kind == "TOOL_CALL_RESULT":
        content = body.get("content")
        text = content if isinstance(content, str) else compact_json(content)
        return f"{body.get('toolCallId')} → {clip(text, 80)}", None
    if kind == "MESSAGES_SNAPSHOT":
        return f"{len(body.get('messages') or [])} messages", None
    if kind == "STATE_SNAPSHOT":
        return clip(compact_json(body.get("snapshot"))), None
    if kind == "STATE_DELTA":
        ops = body.get("delta") or []
        return clip(", ".join(f"{o.get('op')} {o.get('path')}" for o in ops
                              if isinstance(o, dict))), None
    if kind.startswith("SUBAGENT_"):
        outcome = body.get("outcome") if isinstance(body.get("outcome"), dict) else None
        extra = f" {outcome.get('type')}" if outcome else ""
        if outcome and outcome.get("interruptIds"):
            extra += f" [{', '.join(outcome['interruptIds'])}]"
        return f"{body.get('subagentRunId')} {body.get('name', '')}{extra}".strip(), None
    if kind == "CUSTOM":
        return f"{body.get('name')} {clip(compact_json(body.get('value')), 80)}", None
    return "", None


def event_lines(rec: OpsRecord, now: datetime) -> list[Text]:
    """One event: its line, plus one line per interrupt of an interrupt outcome."""
    body = rec.fields
    kind = str(rec.headers.get(EVENT_TYPE) or body.get("type") or "?")
    run = rec.headers.get(RUN_ID) or str(body.get("runId") or "")
    detail, style = _event_detail(kind, body)
    line = _head(rec, run, kind, style or _EVENT_STYLES.get(kind, "white"))
    line.append(safe(detail))
    if rec.headers.get(AGENT) and kind == "RUN_STARTED":
        line.append(f"  agent={safe(rec.headers[AGENT])}", style="dim")
    if body.get("subagentRunId") and not kind.startswith("SUBAGENT_"):
        line.append(f"  ↳{safe(body['subagentRunId'])}", style="dim")
    lines = [line]
    outcome = body.get("outcome")
    if kind == "RUN_FINISHED" and isinstance(outcome, dict) and outcome.get("type") == "interrupt":
        lines += [interrupt_line(i, now) for i in outcome.get("interrupts") or []
                  if isinstance(i, dict)]
    return lines


def decision_lines(rec: OpsRecord) -> list[Text]:
    """A gatekeeper decision: verdict, rejection code and message, ids concerned."""
    body = rec.fields
    verdict = str(body.get("verdict", "?"))
    line = _head(rec, str(body.get("runId") or ""), f"DECISION {verdict}",
                 _VERDICT_STYLES.get(verdict, "white"))
    if body.get("code"):
        line.append(f"{safe(body['code'])}: ", style="bold red")
    line.append(clip(str(body.get("message", ""))))
    if body.get("interruptIds"):
        line.append(f"  [{safe(', '.join(map(str, body['interruptIds'])))}]", style="yellow")
    line.append(f"  request={safe(body.get('requestId'))}", style="dim")
    return [line]


def deadletter_lines(rec: OpsRecord) -> list[Text]:
    """A dead letter: its code, where the refused record came from, and why."""
    body = rec.fields
    line = _head(rec, "", "DEADLETTER", "bold red reverse")
    line.append(f"{safe(body.get('code'))}: ", style="bold red")
    line.append(clip(str(body.get("reason", ""))))
    line.append(safe(f"  from {body.get('sourceTopic')}[{body.get('partition')}]"
                     f"@{body.get('offset')} by {body.get('service')}"), style="dim")
    return [line]


def record_lines(rec: OpsRecord, now: datetime) -> list[Text]:
    """Any record ``tail`` shows."""
    if rec.role == "events":
        return event_lines(rec, now)
    if rec.role == "decisions":
        return decision_lines(rec)
    if rec.role == "deadletter":
        return deadletter_lines(rec)
    line = _head(rec, "", rec.role.upper(), "white")
    line.append(clip(compact_json(rec.value)))
    return [line]
