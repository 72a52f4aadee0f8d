"""Structured logs: one JSON object per line, or readable text on a terminal.

Every line about a run carries ``threadId``, ``runId`` and ``requestId`` when
known: pass them as ``extra={"threadId": ..., ...}`` (or use ``run_fields``),
or, for code running in a run's own task (a producer's run, a consumer's
request), bind them once with ``bound_run(...)``: every line logged from that
task and the tasks it starts — the agent's own included — then carries them
(and the run's ``traceId``), unless the line names its own.
``AGUI_LOG_FORMAT=json|text`` chooses the form (default: JSON unless stderr
is a terminal), ``AGUI_LOG_LEVEL`` the level.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import orjson

RUN_KEYS = ("threadId", "runId", "requestId", "traceId", "agent", "service")
_STD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def run_fields(
    thread_id: str | None = None, run_id: str | None = None, request_id: str | None = None
) -> dict[str, str]:
    """The ``extra`` dict for a log line about one run."""
    out: dict[str, str] = {}
    if thread_id:
        out["threadId"] = thread_id
    if run_id:
        out["runId"] = run_id
    if request_id:
        out["requestId"] = request_id
    return out


_BOUND: ContextVar[Mapping[str, str] | None] = ContextVar("agui_run_fields", default=None)


@contextmanager
def bound_run(
    thread_id: str | None = None,
    run_id: str | None = None,
    request_id: str | None = None,
    trace_id: str | None = None,
) -> Iterator[None]:
    """Every line logged in this task (and the tasks it starts) within the block is about
    this run."""
    token = _BOUND.set(_bound_fields(thread_id, run_id, request_id, trace_id))
    try:
        yield
    finally:
        _BOUND.reset(token)


def bind_run(
    thread_id: str | None = None,
    run_id: str | None = None,
    request_id: str | None = None,
    trace_id: str | None = None,
) -> None:
    """Like ``bound_run`` for the rest of the current task (an HTTP request's task)."""
    _BOUND.set(_bound_fields(thread_id, run_id, request_id, trace_id))


def _bound_fields(thread_id: str | None, run_id: str | None, request_id: str | None,
                  trace_id: str | None) -> dict[str, str]:
    fields = run_fields(thread_id, run_id, request_id)
    if trace_id:
        fields["traceId"] = trace_id
    return fields


class RunContextFilter(logging.Filter):
    """Adds the bound run's fields to a record that does not name them itself.

    A record that names another thread or run (a parent run logging about its
    child, say) is left as it is rather than given a mix of both.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _BOUND.get()
        if not fields:
            return True
        attrs = record.__dict__
        if any(key in attrs and attrs[key] != fields.get(key) for key in ("threadId", "runId")):
            return True
        for key, value in fields.items():
            attrs.setdefault(key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with any ``extra`` fields kept."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    """Readable lines for a terminal, run fields appended as key=value."""

    def __init__(self, service: str) -> None:
        super().__init__("%(asctime)s %(levelname)-7s " + f"[{service}]" + " %(message)s",
                         "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = [f"{k}={record.__dict__[k]}" for k in RUN_KEYS if k in record.__dict__]
        return f"{line} {' '.join(extras)}" if extras else line


def configure(service: str, level: str | None = None, fmt: str | None = None) -> None:
    """Install the root handler for ``service`` (called once by the CLI)."""
    level = (level or os.environ.get("AGUI_LOG_LEVEL", "INFO")).upper()
    fmt = fmt or os.environ.get("AGUI_LOG_FORMAT") or ("text" if sys.stderr.isatty() else "json")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if fmt == "json" else TextFormatter(service))
    handler.addFilter(RunContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aiokafka", "kafka", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
