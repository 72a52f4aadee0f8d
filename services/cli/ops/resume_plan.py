"""Build a resume list from an operator's flags, refusing what the gatekeeper would.

``agui-relay resume`` must never send what the gatekeeper will reject, and
must say why in the operator's terms (which flag to add). ``plan_resume``
takes the thread's state as the gatekeeper last wrote it, the operator's
``--resolve ID=JSON`` / ``--cancel ID`` / ``--cancel-expired`` /
``--cancel-all`` and ``now``, and returns either the complete resume list
(one entry per open interrupt, in the order they were raised) or every
problem found. The rules are not restated here: the gatekeeper's own pure
``decide`` (default policy: a busy thread is refused, resume entries on an
idle thread are refused) judges the list the flags make, and its verdict
is the plan's, with a hint of the flags to change added to each refusal.
``decide`` stops at the first rule broken; to report every problem at once
the plan sets aside what each refusal named (a second answer to one id,
ids not open, uncovered interrupts taken as cancelled, expired ones as
cancelled) and asks again, at most once per rule. What stays here is what
only an operator's command line has: flag parsing, "nothing to resume" on
a thread with no open interrupt, and the check of each answer against its
interrupt's ``responseSchema`` (JSON Schema; a top-level ``null`` is no
answer), which the gatekeeper does not make. Pure: no I/O, no clock; a
schema's ``$ref`` is resolved within the schema only, never fetched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema
import orjson
import referencing
import referencing.exceptions
import regex
from ag_ui.core import Interrupt, ResumeEntry, RunAgentInput
from jsonschema.exceptions import ValidationError

from contracts import Decision, RejectionCode, RunRequest, ThreadState
from contracts.records import parent_thread
from services.agui.expiry import read_expiry
from services.cli.ops.command_line import UNTYPABLE, command_line, option
from services.gatekeeper.rules import Policy, decide
from services.gatekeeper.thread import knows_run

POLICY = Policy()
"""The gatekeeper's default policy: the strictest, so what passes here passes there."""


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
    hint: str = ""
    """What to do instead, its commands and flags a shell's words (``command_line``): exact
    and inert as they are, never to be escaped again."""


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
    """``ID=JSON`` as (id, parsed payload); ``ValueError`` saying what is wrong.

    The answer starts after the first ``=`` at which the rest is JSON, so an id may
    hold ``=`` itself (a base64 id's padding: ``YWJjZA=={"approved": true}``): split
    at the first ``=`` only, such an id could never be answered. A JSON text holds
    ``=`` only inside a string, so an id without one splits as it always did."""
    interrupt_id, sep, raw = item.partition("=")
    if not sep or not interrupt_id:
        raise ValueError(
            f"--resolve {item!r}: expected ID=JSON, e.g. approve-1='{{\"approved\": true}}'")
    try:
        return interrupt_id, orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        first = exc
    at = item.find("=", len(interrupt_id) + 1)
    while at != -1:
        try:
            return item[:at], orjson.loads(item[at + 1:])
        except orjson.JSONDecodeError:
            at = item.find("=", at + 1)
    raise ValueError(
        f"--resolve {interrupt_id}: the answer is not JSON ({first}): {raw!r}") from first


def schema_error(payload: Any, schema: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(why ``payload`` does not fit ``schema``, a warning when the schema itself is bad)."""
    if payload is None:
        return "the answer is null; a resume payload is any JSON except a top-level null", None
    if not schema:
        return None, None
    try:
        return _check(payload, schema)
    except RecursionError:
        return None, ("answer not checked against the schema: its $ref refers back to itself "
                      "without end, or it nests too deep")


def _refuse(uri: str) -> referencing.Resource[Any]:
    """Fetch nothing: jsonschema's default registry would GET any URL a ``$ref`` names,
    from the operator's machine, with no timeout (a schema is whatever a record says)."""
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs field


LOCAL_ONLY: referencing.Registry[Any] = referencing.Registry(
    retrieve=_refuse)  # type: ignore[call-arg]  # attrs alias
"""A schema's ``$ref`` resolves within the schema (and the bundled meta-schemas) only."""


def _check(payload: Any, schema: dict[str, Any]) -> tuple[str | None, str | None]:
    validator_cls = jsonschema.validators.validator_for(schema)
    try:
        validator_cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"responseSchema is not a valid JSON Schema, answer not checked: {exc.message}"
    slow: list[str] = []
    bounded = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        validator_cls, {"pattern": _bounded_pattern(slow)})
    try:
        error = jsonschema.exceptions.best_match(
            bounded(schema, registry=LOCAL_ONLY).iter_errors(payload))
    except referencing.exceptions.Unresolvable as exc:
        return None, f"answer not checked against the schema: {_unresolved(exc)}"
    warning = (f"pattern {slow[0]!r} did not finish within {PATTERN_S:g} s against the answer "
               "(it backtracks exponentially): not checked" if slow else None)
    if error is None:
        return None, warning
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{'at /' + where + ': ' if where else ''}{error.message}", warning


def _unresolved(exc: referencing.exceptions.Unresolvable) -> str:
    """The ``$ref`` as the schema spells it (jsonschema wraps referencing's error)."""
    cause = exc.__cause__ if isinstance(exc.__cause__, referencing.exceptions.Unresolvable) else exc
    if isinstance(cause, referencing.exceptions.NoSuchAnchor):
        ref = f"#{cause.anchor}"
    elif isinstance(cause, referencing.exceptions.PointerToNowhere):
        ref = f"#{cause.ref}"
    else:
        ref = cause.ref
    return f"its $ref {ref!r} is not within it (agui-relay resume fetches no schema)"


PATTERN_S = 1.0
"""How long one ``pattern`` may take against an answer: an agent's ``^(a|aa)+$`` would
otherwise hold the operator's terminal for minutes (``regex``'s timeout; ``re`` has none)."""


def _bounded_pattern(slow: list[str]) -> Callable[..., Iterator[ValidationError]]:
    """The ``pattern`` keyword, each match bounded by ``PATTERN_S``; a pattern that runs
    out of time is named in ``slow`` and passes."""
    def pattern(validator: Any, expected: str, instance: Any, _: Any
                ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "string"):
            return
        try:
            found = regex.search(expected, instance, timeout=PATTERN_S)
        except TimeoutError:
            slow.append(expected)
            return
        except regex.error:
            return  # not a pattern this engine reads: as the browser, left unchecked
        if found is None:
            yield ValidationError(f"{instance!r} does not match {expected!r}")
    return pattern


def _entries(state: ThreadState, options: ResumeOptions, now: datetime) -> list[ResumeEntry]:
    """The resume list the flags say: named answers first, then the blanket cancels."""
    entries = [ResumeEntry(interrupt_id=i, status="resolved", payload=p)
               for i, p in options.resolve]
    entries += [ResumeEntry(interrupt_id=i, status="cancelled") for i in options.cancel]
    named = {e.interrupt_id for e in entries}
    for opened in state.open_interrupts:
        interrupt = opened.interrupt
        if interrupt.id in named:
            continue
        if options.cancel_all or (options.cancel_expired
                                  and read_expiry(interrupt.expires_at).is_expired(now)):
            entries.append(ResumeEntry(interrupt_id=interrupt.id, status="cancelled"))
    return entries


def _unused(prefix: str, taken: Callable[[str], bool]) -> str:
    candidate, n = prefix, 0
    while taken(candidate):
        n += 1
        candidate = f"{prefix}-{n}"
    return candidate


def _probe(state: ThreadState, entries: list[ResumeEntry], now: datetime) -> RunRequest:
    """A request carrying ``entries`` that no rule but the resume rules can refuse."""
    remembered = {d.request_id for d in state.recent_decisions}
    run_id = _unused("agui-relay-resume-plan", lambda r: knows_run(state, r))
    request_id = _unused("agui-relay-resume-plan", remembered.__contains__)
    run_input = RunAgentInput(thread_id=state.thread_id, run_id=run_id, state=None, messages=[],
                              tools=[], context=[], forwarded_props=None, resume=entries)
    return RunRequest(request_id=request_id, agent=state.agent or "agui-relay-resume",
                      input=run_input, submitted_at=now, principal=state.principal)


def _first_each(entries: list[ResumeEntry], _ids: Sequence[str]) -> list[ResumeEntry]:
    seen: set[str] = set()
    kept = []
    for entry in entries:
        if entry.interrupt_id not in seen:
            seen.add(entry.interrupt_id)
            kept.append(entry)
    return kept


def _without(entries: list[ResumeEntry], ids: Sequence[str]) -> list[ResumeEntry]:
    return [e for e in entries if e.interrupt_id not in ids]


def _plus_cancelled(entries: list[ResumeEntry], ids: Sequence[str]) -> list[ResumeEntry]:
    return entries + [ResumeEntry(interrupt_id=i, status="cancelled") for i in ids]


def _as_cancelled(entries: list[ResumeEntry], ids: Sequence[str]) -> list[ResumeEntry]:
    return [ResumeEntry(interrupt_id=e.interrupt_id, status="cancelled")
            if e.interrupt_id in ids else e for e in entries]


SetAside = Callable[[list[ResumeEntry], Sequence[str]], list[ResumeEntry]]
SET_ASIDE: dict[RejectionCode, SetAside] = {
    "duplicate_entry": _first_each,
    "unknown_interrupt": _without,
    "uncovered_interrupts": _plus_cancelled,
    "interrupt_expired": _as_cancelled,
}
"""After a refusal naming these ids, what to assume so that ``decide`` can look further."""


def _flags(ids: Sequence[str]) -> str:
    flags = [option("--cancel", i) for i in ids]
    typed = " ".join(f for f in flags if f)
    if None not in flags:
        return typed
    return f"{typed} (an id holding a NUL cannot be typed)".lstrip()


def _command(line: str | None) -> str:
    return f"`{line}`" if line else f"agui-relay ({UNTYPABLE})"


def _hint(state: ThreadState, code: RejectionCode | None, ids: Sequence[str]) -> str:
    """Which flags answer a refusal, in the operator's terms."""
    if code == "thread_busy":
        return f"or stop it first with {_command(command_line('cancel', state.thread_id))}"
    if code == "uncovered_interrupts":
        return f"add --resolve ID=JSON, {_flags(ids)}, or --cancel-all"
    if code == "interrupt_expired":
        return f"use {_flags(ids)} instead of --resolve, or --cancel-expired"
    if code == "duplicate_entry":
        return "give each id in one --resolve or one --cancel"
    if code == "answer_at_parent":
        parent = command_line("resume", parent_thread(state.thread_id))
        return (f"answer at the parent with {_command(parent)}, or abandon this child with "
                "--cancel-all")
    return ""


def _problem(state: ThreadState, decision: Decision) -> Problem:
    ids = tuple(decision.interrupt_ids or ())
    return Problem(decision.code or decision.verdict, decision.message, ids,
                   _hint(state, decision.code, ids))


def ask_gatekeeper(state: ThreadState, entries: list[ResumeEntry], now: datetime
                   ) -> tuple[list[Problem], list[ResumeEntry], list[str]]:
    """``decide``'s refusals of ``entries``, every rule's in turn; the entries left after
    setting aside what each refusal named; the warnings of the last verdict."""
    problems: list[Problem] = []
    for _ in range(len(SET_ASIDE) + 1):
        decision = decide(state, _probe(state, entries, now), now, POLICY).decision
        if decision.verdict == "admitted":
            break
        problems.append(_problem(state, decision))
        set_aside = SET_ASIDE.get(decision.code) if decision.code else None
        if set_aside is None or any(p.code == decision.code for p in problems[:-1]):
            break
        entries = set_aside(entries, decision.interrupt_ids or [])
    return problems, entries, list(decision.warnings or [])


def _payload_problems(interrupts: dict[str, Interrupt], entries: list[ResumeEntry]
                      ) -> tuple[list[Problem], list[str]]:
    """Each answer to an open interrupt checked against its ``responseSchema``."""
    problems: list[Problem] = []
    warnings: list[str] = []
    for entry in entries:
        interrupt = interrupts.get(entry.interrupt_id)
        if entry.status != "resolved" or interrupt is None:
            continue
        why, warning = schema_error(entry.payload, interrupt.response_schema)
        if warning:
            warnings.append(f"{entry.interrupt_id}: {warning}")
        if why:
            problems.append(Problem("invalid_payload", f"answer to {entry.interrupt_id} does "
                                    f"not fit its responseSchema: {why}", (entry.interrupt_id,)))
    return problems, warnings


def plan_resume(state: ThreadState, options: ResumeOptions, now: datetime) -> Plan:
    """The complete resume list for ``state``'s open interrupts, or why not."""
    interrupts = {o.interrupt.id: o.interrupt for o in state.open_interrupts}
    problems, entries, told = ask_gatekeeper(state, _entries(state, options, now), now)
    if not problems and not interrupts:
        problems.append(Problem("not_interrupted", f"thread {state.thread_id} is {state.status} "
                                "with no open interrupt: nothing to resume"))
    invalid, warnings = _payload_problems(interrupts, entries)  # expired ones set aside
    problems += invalid
    warnings += told
    if problems:
        return Plan(problems=problems, warnings=warnings)
    chosen = {e.interrupt_id: e for e in entries}
    return Plan(entries=[chosen[i] for i in interrupts], warnings=warnings)
