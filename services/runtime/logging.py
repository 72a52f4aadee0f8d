"""Structured logs: one JSON object per line, or readable text on a terminal.

Every line about a run carries ``threadId``, ``runId`` and ``requestId`` when
known: pass them as ``extra={"threadId": ..., ...}`` (or use ``run_fields``),
or, for code running in a run's own task (a producer's run, a consumer's
request), bind them once with ``bound_run(...)``: every line logged from that
task and the tasks it starts — the agent's own included — then carries them
(and the run's ``traceId``), unless the line names its own.
``AGUI_LOG_FORMAT=json|text`` chooses the form (default: JSON unless stderr
is a terminal), ``AGUI_LOG_LEVEL`` the level.

Input cannot steer the logs. Ids and other strings a client chose reach log
lines as arguments and ``extra`` fields; each string is cut to
``AGUI_LOG_FIELD_MAX`` characters (200) with a mark saying how much was cut,
the message to eight times that, a traceback to ``EXC_MAX``. In text form
control characters are escaped (``\\n`` stays two characters) and a traceback's
lines are indented, so an id that holds a newline and a fake ``CRITICAL``
line stays inside its own line; JSON escapes them by itself. One line is
therefore bounded whatever a client sends, and a reader of the pipe
(``agui-relay up``) never meets a line it must buffer without end. A
library's line repeated in a loop (aiokafka's, while a topic is missing or a
broker down) is let through once per 10 s with a count
(``services.runtime.log_repeats``).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.runtime.log_repeats import RepeatFilter

RUN_KEYS = ("threadId", "runId", "requestId", "traceId", "agent", "service")
_STD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}
FIELD_MAX = 200
"""Characters of one string argument or field a line keeps (``AGUI_LOG_FIELD_MAX``)."""
EXC_MAX = 16_384
"""Characters of a traceback a line keeps."""
CONTROLS = ("\x00-\x1f\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891"
            "\u08e2\u115f\u1160\u1680\u17b4\u17b5\u180b-\u180f\u2000-\u200f\u2028-\u202f"
            "\u205f-\u206f\u2800\u3000\u3164\ud800-\udfff\ufe00-\ufe0f\ufeff\uffa0"
            "\ufff0-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
            "\U0001d173-\U0001d17a\U000e0000-\U000e0fff")
"""What must not reach a log line or a terminal as it is, as a regex class: the C0 and C1
controls and DEL; every format character (Unicode category Cf: the bidi controls, which
reorder what a reader sees, and the zero-width ones, U+200B, U+2060, U+FEFF...); the line
and paragraph separators; every space but U+0020 (U+00A0, U+3000...); lone surrogates
(which no terminal encoding can write); and the other characters drawn as nothing (the
default-ignorable ones: variation selectors, tags, the Hangul fillers; U+2800). Each of
these lets one id pass for another (``alpha\\u200b`` prints as ``alpha``) or for more than
one. Written out, not derived from ``unicodedata`` at import (a scan of every code point
takes a quarter of a second); ``tests/unit/runtime`` checks it against ``unicodedata``."""
_CONTROL = re.compile(f"[{CONTROLS}]")


def escape_char(char: str) -> str:
    """One character as an escape Python would read back: ``\\n``, ``\\x1b``,
    ``\\u200b``, ``\\U000e0041``."""
    shown = repr(char)[1:-1]
    if shown != char:
        return shown
    code = ord(char)  # printable to Python, drawn as nothing on a terminal (U+3164)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…(+{len(text) - limit} chars)"


def escape_controls(text: str) -> str:
    """Control and bidi characters as escapes (``\\n``, ``\\x1b``, ``\\u202e``): one
    record stays one line, read in the order it was written."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: escape_char(m.group()), text)


def bounded_message(record: logging.LogRecord, field_max: int) -> str:
    """The record's message with every string argument clipped, and the whole bounded."""
    args = record.args
    if not args:
        return clip(str(record.msg), field_max * 8)
    clipped: object
    if isinstance(args, Mapping):
        clipped = {k: clip(v, field_max) if isinstance(v, str) else v for k, v in args.items()}
    else:
        clipped = tuple(clip(a, field_max) if isinstance(a, str) else a for a in args)
    try:
        text = str(record.msg) % clipped
    except (TypeError, ValueError, KeyError):  # a bad format string still logs, plainly
        text = f"{record.msg} {clipped!r}"
    return clip(text, field_max * 8)


def _field(value: object, field_max: int) -> object:
    return clip(value, field_max) if isinstance(value, str) else value


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

    def __init__(self, service: str, field_max: int = FIELD_MAX) -> None:
        super().__init__()
        self.service = service
        self.field_max = field_max

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": bounded_message(record, self.field_max),
        }
        for key, value in record.__dict__.items():
            if key not in _STD and not key.startswith("_"):
                doc[key] = _field(value if isinstance(value, (str, int, float, bool))
                                  or value is None else str(value), self.field_max)
        if record.exc_info:
            doc["exc"] = clip(self.formatException(record.exc_info), EXC_MAX)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    """Readable lines for a terminal, run fields appended as key=value."""

    def __init__(self, service: str, field_max: int = FIELD_MAX) -> None:
        super().__init__("%(asctime)s %(levelname)-7s " + f"[{service}]" + " %(message)s",
                         "%H:%M:%S")
        self.field_max = field_max

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape_controls(bounded_message(record, self.field_max))
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return clip(super().formatException(ei), EXC_MAX)

    def format(self, record: logging.LogRecord) -> str:
        # A traceback's lines are indented: no line but a record's first starts with a time.
        line = super().format(record).replace("\n", "\n    ")
        extras = [f"{k}={escape_controls(str(_field(str(record.__dict__[k]), self.field_max)))}"
                  for k in RUN_KEYS if k in record.__dict__]
        return f"{line} {' '.join(extras)}" if extras else line


class LogSettings(BaseSettings):
    """``AGUI_LOG_*``: refused at start when wrong (a bogus level or a field limit that is
    not a number had ended the service with a traceback; 0 mangled every field)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      env_ignore_empty=True)

    level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                     BeforeValidator(lambda v: v.strip().upper() if isinstance(v, str) else v)
                     ] = Field("INFO", alias="AGUI_LOG_LEVEL")
    format: Literal["json", "text"] | None = Field(None, alias="AGUI_LOG_FORMAT")
    """Unset: text on a terminal, JSON lines otherwise."""
    field_max: int = Field(FIELD_MAX, alias="AGUI_LOG_FIELD_MAX", ge=16, le=1_000_000)


def configure(service: str, level: str | None = None, fmt: str | None = None) -> None:
    """Install the root handler for ``service`` (called once by the CLI)."""
    settings = LogSettings()
    level = (level or settings.level).upper()
    fmt = fmt or settings.format or ("text" if sys.stderr.isatty() else "json")
    field_max = settings.field_max
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service, field_max) if fmt == "json"
                         else TextFormatter(service, field_max))
    handler.addFilter(RunContextFilter())
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aiokafka", "kafka", "uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
