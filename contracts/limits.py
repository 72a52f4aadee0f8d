"""Input limits: how long an id or a name, and how deep a JSON document, may be.

Every id a client chooses travels further than the request that carried it:
a ``threadId`` is the key of every record of its thread and is quoted in
decisions and thread states; a ``runId`` is repeated by every open interrupt
and every remembered decision; ids appear in log lines. An unbounded id lets
one request make records the broker refuses (a partition then stops deciding
for every tenant) or log lines that freeze a pipe. A document nested deeper
than a serialiser handles fails where nothing expects it. So the limits are
stated once, here, and enforced at the edge (the consumer service answers a
``400`` naming the field and the limit) and again by every service that
reads a record another client may have written (the gatekeeper rejects, the
producer ends the run).

Pure: the checks look at parsed JSON and return what is wrong, or None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

DEFAULT_MAX_ID_LENGTH = 256
"""Characters an id or a name may have (``AGUI_MAX_ID_LENGTH``)."""
DEFAULT_MAX_JSON_DEPTH = 64
DEFAULT_MAX_RESUME_ENTRIES = 256
"""Levels of nesting a JSON document may have, the top object being level 1
(``AGUI_MAX_JSON_DEPTH``). orjson itself parses up to 1,024 and serialises up to 255."""
DEFAULT_MAX_JSON_CONTAINERS = 32_768
"""Objects and arrays one document may hold (``AGUI_MAX_JSON_CONTAINERS``). pydantic writes
the free-form members of an input (``state``, ``forwardedProps``, tool parameters, resume
payloads) at about a microsecond per array: a 1 MiB body of nested empty arrays took
the consumer service 4 s, the gatekeeper up to 6 s and a worker 3 s, each frozen
meanwhile (found by review); at this many, tens of milliseconds."""

EXPIRES_AT_MAX_LENGTH = 128
"""Characters an interrupt's ``expiresAt`` may have: a date (ISO 8601 takes 24, what
JavaScript's ``Date.prototype.toString`` writes up to about 90). Every
service reads it as V8's ``Date`` parser does (``services.agui.jsdate``), in time that
grows with its length: one of 250,000 characters took 0.1 to 0.6 s to read, on the
gatekeeper's decision path and in the consumer service's thread view (found by review)."""

FIELD_SHOWN = 120
"""Characters of a field's path a detail quotes (a path is made of client keys)."""

LimitCode = Literal["id_too_long", "json_too_deep", "json_too_complex", "expires_at_too_long"]


@dataclass(frozen=True, slots=True)
class InputLimits:
    """The limits in force (the defaults unless configured)."""

    max_id_length: int = DEFAULT_MAX_ID_LENGTH
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    max_resume_entries: int = DEFAULT_MAX_RESUME_ENTRIES
    """Entries one resume may carry: the consumer service refuses more (413), and a
    worker ends a run raising more interrupts than that (a resume must answer every one,
    so none could ever answer them)."""
    max_json_containers: int = DEFAULT_MAX_JSON_CONTAINERS


@dataclass(frozen=True, slots=True)
class LimitExceeded:
    """One limit broken: which field, by how much, and the variable that sets it."""

    code: LimitCode
    field: str
    """Where, as a slash-separated path into the document (``messages/3/id``)."""
    actual: int
    limit: int

    @property
    def variable(self) -> str | None:
        """The setting that raises the limit (``expiresAt``'s is fixed)."""
        return {"id_too_long": "AGUI_MAX_ID_LENGTH", "json_too_deep": "AGUI_MAX_JSON_DEPTH",
                "json_too_complex": "AGUI_MAX_JSON_CONTAINERS"}.get(self.code)

    @property
    def detail(self) -> str:
        """A sentence for a problem's ``detail`` or a decision's message (bounded length)."""
        field = self.field if len(self.field) <= FIELD_SHOWN else f"{self.field[:FIELD_SHOWN]}…"
        if self.code == "id_too_long":
            return (f"{field} is {self.actual} characters long; ids and names may have "
                    f"at most {self.limit} ({self.variable})")
        if self.code == "json_too_complex":
            return (f"the JSON holds more than {self.limit} objects and arrays (at {field}); "
                    f"this service takes at most {self.limit} ({self.variable})")
        if self.code == "expires_at_too_long":
            return (f"{field} is {self.actual} characters long; an interrupt's expiresAt "
                    f"is a date, at most {self.limit} characters")
        return (f"the JSON is nested deeper than {self.limit} levels (at {field}); "
                f"this service takes at most {self.limit} ({self.variable})")


def check_id(field: str, value: object, limits: InputLimits) -> LimitExceeded | None:
    """``value`` (an id or a name) when it is a string longer than the limit."""
    if isinstance(value, str) and len(value) > limits.max_id_length:
        return LimitExceeded("id_too_long", field, len(value), limits.max_id_length)
    return None


def json_depth_exceeded(document: Any, limits: InputLimits, *, size_hint: int | None = None,
                        base: str = "", top: int = 1, containers: bool = True
                        ) -> LimitExceeded | None:
    """Where ``document`` (parsed JSON) is nested deeper than the limit, or (``containers``)
    that it holds more objects and arrays than ``max_json_containers``; None when neither.

    ``size_hint``: the number of ``[`` and ``{`` bytes of the raw text, when
    known; a document with no more brackets than the limits cannot break them,
    so the walk is skipped (the common case costs two ``bytes.count``).
    ``top``: the level of ``document`` itself (0 for an envelope around the
    document the limit is about, so a ``RunRequest`` is measured as its input).
    Iterative, so no document can exhaust the interpreter's stack; only containers
    are visited, and a path is built only for the one reported (building one per
    node had cost 0.5 to 0.8 s per MiB).
    """
    limit = limits.max_json_depth
    most = limits.max_json_containers if containers else 1 << 62
    if size_hint is not None and size_hint <= min(limit, most):
        return None
    if not isinstance(document, (dict, list)):
        return None
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(document, top)]
    count = 0
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return _too_deep(document, limit, base, top)
        count += depth > 0  # an envelope (``top`` 0) is not its input's
        if count > most:
            return LimitExceeded("json_too_complex", base or "/", count, most)
        inner = depth + 1
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (dict, list)):
                stack.append((child, inner))
    return None


def _too_deep(document: Any, limit: int, base: str, top: int) -> LimitExceeded:
    """The first place, walking as ``json_depth_exceeded`` does, nested deeper than
    ``limit``, with its path (the document is known to have one)."""
    stack: list[tuple[Any, int, str]] = [(document, top, base)]
    while stack:
        node, depth, path = stack.pop()
        if depth > limit:
            return LimitExceeded("json_too_deep", path or "/", depth, limit)
        children: Iterator[tuple[str, Any]]
        if isinstance(node, dict):
            children = iter(node.items())
        else:
            children = ((str(i), v) for i, v in enumerate(node))
        for name, child in children:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1, f"{path}/{name}" if path else str(name)))
    raise AssertionError("no place deeper than the limit")


def bracket_count(raw: bytes) -> int:
    """The ``size_hint`` of ``json_depth_exceeded`` for raw JSON bytes."""
    return raw.count(b"[") + raw.count(b"{")


def _items(raw: Mapping[str, Any], member: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    items = raw.get(member)
    if isinstance(items, list):
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                yield i, item


def run_input_ids(raw: Mapping[str, Any], base: str = "") -> Iterator[tuple[str, object]]:
    """Every id and name of a ``RunAgentInput`` (wire JSON), with its path."""
    prefix = f"{base}/" if base else ""
    for member in ("threadId", "runId", "parentRunId"):
        yield f"{prefix}{member}", raw.get(member)
    for i, message in _items(raw, "messages"):
        at = f"{prefix}messages/{i}"
        for member in ("id", "toolCallId", "name"):
            yield f"{at}/{member}", message.get(member)
        for j, call in _items(message, "toolCalls"):
            yield f"{at}/toolCalls/{j}/id", call.get("id")
            function = call.get("function")
            if isinstance(function, Mapping):
                yield f"{at}/toolCalls/{j}/function/name", function.get("name")
    for i, entry in _items(raw, "resume"):
        yield f"{prefix}resume/{i}/interruptId", entry.get("interruptId")
    for i, tool in _items(raw, "tools"):
        yield f"{prefix}tools/{i}/name", tool.get("name")


def check_run_input(raw: Mapping[str, Any], limits: InputLimits, *, size_hint: int | None = None,
                    base: str = "") -> LimitExceeded | None:
    """The first limit a ``RunAgentInput`` (wire JSON) breaks, or None.

    Depth first (a deep document is refused before anything walks it), then
    every id and name in document order.
    """
    deep = json_depth_exceeded(raw, limits, size_hint=size_hint, base=base)
    if deep is not None:
        return deep
    for path, value in run_input_ids(raw, base):
        broken = check_id(path, value, limits)
        if broken is not None:
            return broken
    return None


def check_run_request(raw: Mapping[str, Any], limits: InputLimits, *,
                      size_hint: int | None = None) -> LimitExceeded | None:
    """The first limit a ``RunRequest`` record (wire JSON) breaks, or None.

    Depth is counted as in the input it carries (the envelope is level 0), so a
    body the consumer service accepted is never refused here for its depth.
    """
    deep = json_depth_exceeded(raw, limits, size_hint=size_hint, top=0)
    if deep is not None:
        return deep
    for member in ("requestId", "agent", "principal"):
        broken = check_id(member, raw.get(member), limits)
        if broken is not None:
            return broken
    run_input = raw.get("input")
    if isinstance(run_input, Mapping):
        return check_run_input(run_input, limits, size_hint=0, base="input")
    return None


def interrupt_ids(outcome: Mapping[str, Any], base: str = "outcome"
                  ) -> Iterator[tuple[str, object]]:
    """The ids of an interrupt outcome (wire JSON), with their paths."""
    for i, interrupt in _items(outcome, "interrupts"):
        for member in ("id", "toolCallId"):
            yield f"{base}/interrupts/{i}/{member}", interrupt.get(member)


def interrupt_limits(outcome: Mapping[str, Any], limits: InputLimits,
                     base: str = "outcome") -> LimitExceeded | None:
    """The first limit an interrupt outcome breaks: an id over the id limit, an
    ``expiresAt`` over ``EXPIRES_AT_MAX_LENGTH``, its interrupts nested too deep or holding
    more objects and arrays than ``max_json_containers``; or None. The open interrupts are
    written again with every thread state, listed and notified: 260 KB of nested metadata
    in one took the gatekeeper 0.38 s per decision on its thread and ``GET /threads`` 1 s
    (found by review)."""
    for path, member in interrupt_ids(outcome, base):
        too_long = check_id(path, member, limits)
        if too_long is not None:
            return too_long
    for i, interrupt in _items(outcome, "interrupts"):
        text = interrupt.get("expiresAt")
        if isinstance(text, str) and len(text) > EXPIRES_AT_MAX_LENGTH:
            return LimitExceeded("expires_at_too_long", f"{base}/interrupts/{i}/expiresAt",
                                 len(text), EXPIRES_AT_MAX_LENGTH)
    return json_depth_exceeded(outcome.get("interrupts"), limits, base=f"{base}/interrupts",
                               top=3)


def outcome_limits(value: bytes, limits: InputLimits) -> LimitExceeded | None:
    """The first input limit a (valid) ``RUN_FINISHED`` breaks: depth, or an interrupt's ids
    or ``expiresAt`` (``interrupt_limits``).

    The gatekeeper applies it to each run's end it reads (what another client wrote
    too), the worker to the end it writes, so a run's end breaking it is refused before
    any client sees it.

    Too deep, its interrupts could not be written in a thread state (orjson
    writes 255 levels at most); an id over the limit could never be answered
    (the consumer service refuses such a resume entry). Its objects and arrays are not
    counted: a run's result is the agent's, and may be large.
    """
    hint = bracket_count(value)
    if (hint <= limits.max_json_depth and len(value) <= limits.max_id_length
            and b"expiresAt" not in value):
        return None
    raw = orjson.loads(value)
    deep = json_depth_exceeded(raw, limits, size_hint=hint, containers=False)
    if deep is not None:
        return deep
    outcome = raw.get("outcome") if isinstance(raw, dict) else None
    if not isinstance(outcome, dict):
        return None
    return interrupt_limits(outcome, limits)
