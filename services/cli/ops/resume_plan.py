"""Build a resume list from an operator's flags, refusing what the gatekeeper would.

``agui-relay resume`` must never send what the gatekeeper will reject, and
must say why in the operator's terms (which flag to add). ``plan_resume``
takes the thread's state as the gatekeeper last wrote it, the operator's
``--resolve ID=JSON`` / ``--cancel ID`` / ``--cancel-expired`` /
``--cancel-all`` and ``now``, and returns either the complete resume list
(one entry per open interrupt, in the order they were raised) or every
problem found: the thread busy or not interrupted, an id named twice, an id
that is not open, an expired interrupt being resolved (expiry read exactly
as the gatekeeper reads it), an answer that does not fit the interrupt's
``responseSchema`` (JSON Schema) or is a top-level ``null``, and interrupts
left uncovered. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema
import orjson
from ag_ui.core import Interrupt, ResumeEntry

from contracts import ThreadState
from services.gatekeeper.expiry import read_expiry

MISSING = object()


@dataclass(frozen=True, slots=True)
class ResumeOptions:
    """The operator's answers, as given on the command line."""

    resolve: Sequence[tuple[str, Any]] = ()
    cancel: Sequence[str] = ()
    cancel_expired: bool = False
    cancel_all: bool = False


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason the resume cannot be sent; ``code`` follows the gatekeeper's."""

    code: str
    message: str
    interrupt_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """The resume list to send, or the problems that forbid sending one."""

    entries: list[ResumeEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def parse_resolve(item: str) -> tuple[str, Any]:
    """``ID=JSON`` as (id, parsed payload); ``ValueError`` saying what is wrong."""
    interrupt_id, sep, raw = item.partition("=")
    if not sep or not interrupt_id:
        raise ValueError(
            f"--resolve {item!r}: expected ID=JSON, e.g. approve-1='{{\"approved\": true}}'")
    try:
        return interrupt_id, orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(
            f"--resolve {interrupt_id}: the answer is not JSON ({exc}): {raw!r}") from exc


def schema_error(payload: Any, schema: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(why ``payload`` does not fit ``schema``, a warning when the schema itself is bad)."""
    if payload is None:
        return "the answer is null; a resume payload is any JSON except a top-level null", None
    if not schema:
        return None, None
    validator_cls = jsonschema.validators.validator_for(schema)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"responseSchema is not a valid JSON Schema, answer not checked: {exc.message}"
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(payload))
    if error is None:
        return None, None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{'at /' + where + ': ' if where else ''}{error.message}", None


def _flags(ids: Sequence[str]) -> str:
    return " ".join(f"--cancel {i}" for i in ids)


def _state_problem(state: ThreadState, options: ResumeOptions) -> Problem | None:
    if state.status == "running":
        return Problem("thread_busy", f"thread {state.thread_id} is running run {state.run_id}; "
                       f"wait for it to end or stop it with `agui-relay cancel {state.thread_id}`")
    if not state.open_interrupts:
        named = tuple(i for i, _ in options.resolve) + tuple(options.cancel)
        return Problem("unknown_interrupt" if named else "not_interrupted",
                       f"thread {state.thread_id} is {state.status} with no open interrupt: "
                       "nothing to resume", named)
    return None


def plan_resume(state: ThreadState, options: ResumeOptions, now: datetime) -> Plan:
    """The complete resume list for ``state``'s open interrupts, or why not."""
    blocking = _state_problem(state, options)
    if blocking is not None:
        return Plan(problems=[blocking])
    interrupts: dict[str, Interrupt] = {o.interrupt.id: o.interrupt for o in state.open_interrupts}
    problems: list[Problem] = []
    warnings: list[str] = []
    chosen: dict[str, ResumeEntry] = {}
    named = [(i, p) for i, p in options.resolve] + [(i, MISSING) for i in options.cancel]

    duplicates = sorted(i for i, n in Counter(i for i, _ in named).items() if n > 1)
    if duplicates:
        problems.append(Problem("duplicate_entry", "each interrupt is answered once; named twice: "
                                + ", ".join(duplicates), tuple(duplicates)))
    unknown = sorted({i for i, _ in named if i not in interrupts})
    if unknown:
        problems.append(Problem("unknown_interrupt", f"not open on thread {state.thread_id}: "
                                f"{', '.join(unknown)} (open: {', '.join(interrupts)})",
                                tuple(unknown)))

    for interrupt_id, payload in named:
        interrupt = interrupts.get(interrupt_id)
        if interrupt is None or interrupt_id in chosen:
            continue
        if payload is MISSING:
            chosen[interrupt_id] = ResumeEntry(interrupt_id=interrupt_id, status="cancelled")
            continue
        expiry = read_expiry(interrupt.expires_at)
        if expiry.is_expired(now):
            problems.append(Problem(
                "interrupt_expired", f"interrupt {interrupt_id} expired at {interrupt.expires_at} "
                f"and can no longer be answered; cancel it (--cancel {interrupt_id} or "
                "--cancel-expired)", (interrupt_id,)))
            continue
        why, warning = schema_error(payload, interrupt.response_schema)
        if warning:
            warnings.append(f"{interrupt_id}: {warning}")
        if why:
            problems.append(Problem("invalid_payload", f"answer to {interrupt_id} does not fit "
                                    f"its responseSchema: {why}", (interrupt_id,)))
            continue
        chosen[interrupt_id] = ResumeEntry(interrupt_id=interrupt_id, status="resolved",
                                           payload=payload)

    addressed = {i for i, _ in named}
    for interrupt_id, interrupt in interrupts.items():
        if interrupt_id in addressed:
            continue
        expired = read_expiry(interrupt.expires_at).is_expired(now)
        if options.cancel_all or (options.cancel_expired and expired):
            chosen[interrupt_id] = ResumeEntry(interrupt_id=interrupt_id, status="cancelled")

    uncovered = [i for i in interrupts if i not in addressed and i not in chosen]
    if uncovered:
        problems.append(Problem(
            "uncovered_interrupts", "every open interrupt needs an answer; not covered: "
            f"{', '.join(uncovered)} (add --resolve ID=JSON, {_flags(uncovered)}, "
            "or --cancel-all)", tuple(uncovered)))
    if problems:
        return Plan(problems=problems, warnings=warnings)
    return Plan(entries=[chosen[i] for i in interrupts], warnings=warnings)
