"""The independent checker: what the output topics must show after any fault.

The fault scenarios kill, restart and flood the services; afterwards this
module judges what was committed on the topics, without trusting any service
code. ``judge(records)`` is a pure function over the records one snapshot
read (``faults.snapshot`` does the reading, with ``read_committed``) and
returns a ``Report`` with counts and every violation of the invariants:

1. **Nothing silently dropped.** Every ``requests`` record is accounted for:
   a record whose ``requestId`` (non-empty) and ``input.threadId`` (a string)
   can be read gets a decision; one without them (not JSON, not an object,
   ids missing) gets a dead letter naming its partition and offset. A dead
   letter accounts for any record.
2. **Exactly one decision per request.** For each (threadId, requestId) the
   decisions equal the records in number (one more when the first verdict
   was ``queued``: the final one follows), and the final thread-level
   verdicts agree (a retry gets the same decision again).
   A record that is not a valid RunRequest is decided ``invalid_input``.
3. **No run dispatched twice; no dispatch without admission.** At most one
   dispatch per requestId and per (threadId, runId); exactly one for every
   admitted requestId and none for the others.
4. **Every admitted run ends exactly once.** Its events (keyed by threadId,
   run named by the ``agui-run-id`` header), de-duplicated by ``agui-seq``,
   are numbered 0..n-1 with no gap, open with ``RUN_STARTED`` and end with
   exactly one terminal event; the only thing allowed after ``RUN_FINISHED``
   is one late ``RUN_ERROR`` (digest §2d). No run has events without a
   dispatch.
5. **No thread left running**: the latest ThreadState of every thread is not
   ``running`` and holds no queued request.
6. **No approved side effect twice**: at most one execution per
   (threadId, effect key), as recorded in the producers' checkpoints.
7. **A run's end is on ``runs`` if and only if it is on ``events``**, the
   same record (sequence number and bytes); everything on ``runs`` is a run
   boundary that ``events`` holds too (what the gatekeeper reads of runs is
   what their clients read).

The checker decodes with ``contracts`` (the wire contract) and nothing else
from the services, so a bug in a service cannot hide in its own checker.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from contracts import (
    DeadLetter,
    Decision,
    DecodeError,
    Dispatch,
    EventHeaders,
    RunRequest,
    ThreadState,
    decode,
)

TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})
BOUNDARY_TYPES = TERMINAL_TYPES | {"RUN_STARTED"}
INTAKE_CODES = frozenset({"invalid_input", "key_mismatch"})
"""Refusals made before any thread is consulted (stateless, not remembered)."""
MAX_LISTED = 25
"""Violations shown per kind in ``Report.describe``."""


@dataclass(frozen=True, slots=True)
class Rec:
    """One consumed record, reduced to what the checker reads."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = 0


@dataclass(frozen=True, slots=True)
class Execution:
    """One side effect a producer recorded as performed (or started)."""

    thread_id: str
    key: str
    run_id: str | None = None


@dataclass(slots=True)
class Records:
    """Everything one snapshot read, by role."""

    requests: list[Rec] = field(default_factory=list)
    decisions: list[Rec] = field(default_factory=list)
    dispatches: list[Rec] = field(default_factory=list)
    events: list[Rec] = field(default_factory=list)
    runs: list[Rec] = field(default_factory=list)
    """The boundary topic (``runs``)."""
    threads: list[Rec] = field(default_factory=list)
    deadletters: list[Rec] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    requests_topic: str = "requests"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: its kind and what exactly broke."""

    kind: str
    detail: str


@dataclass(slots=True)
class Report:
    """Counts of what was seen and the violations found."""

    counts: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def kinds(self) -> Counter[str]:
        """Violations per kind."""
        return Counter(v.kind for v in self.violations)

    def add(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(kind, detail))

    def summary(self) -> str:
        """One line: the main counts and the violations per kind."""
        c = self.counts
        verdicts = ", ".join(f"{k.removeprefix('verdict.')}={v}"
                             for k, v in sorted(c.items()) if k.startswith("verdict."))
        terminals = ", ".join(f"{k.removeprefix('terminal.')}={v}"
                              for k, v in sorted(c.items()) if k.startswith("terminal."))
        broken = ", ".join(f"{k}={v}" for k, v in sorted(self.kinds().items())) or "none"
        return (
            f"requests={c['requests']} (malformed {c['requests.malformed']}, dead-lettered "
            f"{c['requests.deadlettered']}) decisions={c['decisions']} [{verdicts}] "
            f"dispatches={c['dispatches']} runs={c['runs']} [{terminals}] "
            f"late_errors={c['runs.late_error']} duplicate_events={c['events.duplicates']} "
            f"threads={c['threads']} executions={c['executions']} "
            f"deadletters={c['deadletters']} violations: {broken}"
        )

    def describe(self) -> str:
        """The summary and the first violations of each kind, for an assertion message."""
        lines = [self.summary()]
        shown: Counter[str] = Counter()
        for v in self.violations:
            shown[v.kind] += 1
            if shown[v.kind] <= MAX_LISTED:
                lines.append(f"  {v.kind}: {v.detail}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- reading values


def request_ids(value: bytes | None) -> tuple[str, str] | None:
    """(input.threadId, requestId) when both can be read from a raw request, else None."""
    if value is None:
        return None
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("input"), dict):
        return None
    request_id, thread_id = raw.get("requestId"), raw["input"].get("threadId")
    if not (isinstance(request_id, str) and request_id and isinstance(thread_id, str)):
        return None
    return thread_id, request_id  # "" is a schema-valid threadId: a decision may name it


def _valid_request(value: bytes | None) -> bool:
    try:
        decode(RunRequest, value or b"")
    except DecodeError:
        return False
    return True


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)})"


def _key_text(key: bytes | None) -> str | None:
    return key.decode("utf-8", "replace") if key is not None else None


# --------------------------------------------------------------------------- the judge


def judge(records: Records) -> Report:
    """Every invariant of the module docstring, checked over one snapshot."""
    report = Report()
    dead = _dead_letters(records, report)
    decisions = _decisions(records, report)
    _requests(records, dead, decisions, report)
    admitted_runs = _dispatches(records, decisions, report)
    _runs(records, admitted_runs, report)
    _boundaries(records, report)
    _threads(records, report)
    _executions(records.executions, report)
    return report


def _dead_letters(records: Records, report: Report) -> set[tuple[int, int]]:
    """(partition, offset) of every ``requests`` record that was dead-lettered."""
    dead: set[tuple[int, int]] = set()
    for rec in records.deadletters:
        report.counts["deadletters"] += 1
        try:
            letter = decode(DeadLetter, rec.value or b"")
        except DecodeError as exc:
            report.add("deadletter_unreadable", f"deadletter p{rec.partition}@{rec.offset}: {exc}")
            continue
        report.counts[f"deadletters.{letter.code}"] += 1
        if letter.source_topic == records.requests_topic:
            dead.add((letter.partition, letter.offset))
    return dead


def _decisions(records: Records, report: Report) -> dict[tuple[str, str], list[Decision]]:
    """Decisions per (threadId, requestId), in the order they were written."""
    out: dict[tuple[str, str], list[Decision]] = defaultdict(list)
    for rec in sorted(records.decisions, key=lambda r: (r.partition, r.offset)):
        try:
            decision = decode(Decision, rec.value or b"")
        except DecodeError as exc:
            report.add("decision_unreadable", f"decisions p{rec.partition}@{rec.offset}: {exc}")
            continue
        report.counts["decisions"] += 1
        report.counts[f"verdict.{decision.verdict}"] += 1
        if decision.code:
            report.counts[f"code.{decision.code}"] += 1
        out[(decision.thread_id or "", decision.request_id)].append(decision)
    return out


def _requests(
    records: Records,
    dead: set[tuple[int, int]],
    decisions: Mapping[tuple[str, str], list[Decision]],
    report: Report,
) -> None:
    """Invariants 1 and 2: every record accounted for, one decision per record."""
    expected: Counter[tuple[str, str]] = Counter()
    malformed: Counter[tuple[str, str]] = Counter()
    for rec in records.requests:
        report.counts["requests"] += 1
        valid = _valid_request(rec.value)
        if not valid:
            report.counts["requests.malformed"] += 1
        if (rec.partition, rec.offset) in dead:
            report.counts["requests.deadlettered"] += 1
            continue
        ids = request_ids(rec.value)
        if ids is None:
            report.add("request_dropped",
                       f"requests p{rec.partition}@{rec.offset} has no readable ids and no "
                       "dead letter")
            continue
        expected[ids] += 1
        if not valid:
            malformed[ids] += 1
    for ids, wanted in expected.items():
        _one_decision_each(ids, wanted, malformed[ids], decisions.get(ids, []), report)
    for ids, found in decisions.items():
        if ids not in expected:
            report.add("decision_without_request",
                       f"thread {_short(ids[0])!r} request {_short(ids[1])!r}: "
                       f"{len(found)} decision(s) and no such request record")


def _one_decision_each(
    ids: tuple[str, str], wanted: int, malformed: int, found: Sequence[Decision], report: Report
) -> None:
    where = f"thread {_short(ids[0])!r} request {_short(ids[1])!r}"
    queued_first = bool(found) and found[0].verdict == "queued"
    total = wanted + (1 if queued_first else 0)
    if len(found) < total:
        left = " (left queued)" if queued_first else ""
        report.add("request_undecided",
                   f"{where}: {wanted} record(s), {len(found)} decision(s){left}")
        return
    if len(found) > total:
        report.add("decision_duplicated",
                   f"{where}: {wanted} record(s), {len(found)} decisions "
                   f"({', '.join(d.verdict for d in found)})")
    invalid = sum(1 for d in found if d.code == "invalid_input")
    if invalid < malformed:
        report.add("malformed_not_invalid_input",
                   f"{where}: {malformed} malformed record(s), {invalid} invalid_input decision(s)")
    final = {(d.verdict, d.code, d.run_id) for d in found
             if d.verdict != "queued" and d.code not in INTAKE_CODES}
    if len(final) > 1:
        report.add("decision_inconsistent",
                   f"{where}: a retried request got different decisions {sorted(map(str, final))}")


def _dispatches(
    records: Records, decisions: Mapping[tuple[str, str], list[Decision]], report: Report
) -> set[tuple[str, str]]:
    """Invariant 3; returns the (threadId, runId) of every dispatched run."""
    by_request: Counter[tuple[str, str]] = Counter()
    by_run: Counter[tuple[str, str]] = Counter()
    for rec in records.dispatches:
        try:
            dispatch = decode(Dispatch, rec.value or b"")
        except DecodeError as exc:
            report.add("dispatch_unreadable", f"{rec.topic} p{rec.partition}@{rec.offset}: {exc}")
            continue
        report.counts["dispatches"] += 1
        thread_id = dispatch.input.thread_id
        by_request[(thread_id, dispatch.request_id)] += 1
        by_run[(thread_id, dispatch.input.run_id)] += 1
    for (thread_id, run_id), n in by_run.items():
        if n > 1:
            report.add("run_dispatched_twice",
                       f"thread {_short(thread_id)!r} run {_short(run_id)!r} dispatched {n} times")
    admitted = {ids for ids, found in decisions.items()
                if any(d.verdict == "admitted" for d in found)}
    for ids, n in by_request.items():
        where = f"thread {_short(ids[0])!r} request {_short(ids[1])!r}"
        if ids not in admitted:
            report.add("dispatch_without_admission", f"{where}: dispatched, never admitted")
        elif n > 1:
            report.add("request_dispatched_twice", f"{where}: dispatched {n} times")
    for ids in admitted - set(by_request):
        report.add("admission_without_dispatch",
                   f"thread {_short(ids[0])!r} request {_short(ids[1])!r}: admitted, no dispatch")
    return set(by_run)


@dataclass(slots=True)
class _Run:
    thread_id: str
    run_id: str
    by_seq: dict[int, str] = field(default_factory=dict)
    """seq → event type, first occurrence kept."""
    terminal_outcome: str | None = None
    duplicates: int = 0
    conflicts: list[str] = field(default_factory=list)


def _runs(records: Records, dispatched: set[tuple[str, str]], report: Report) -> None:
    """Invariant 4 over the events topic."""
    runs: dict[tuple[str, str], _Run] = {}
    for rec in sorted(records.events, key=lambda r: (r.partition, r.offset)):
        report.counts["events"] += 1
        headers = EventHeaders.decode(rec.headers)
        thread_id = _key_text(rec.key)
        if headers is None or thread_id is None:
            report.add("event_unattributed",
                       f"events p{rec.partition}@{rec.offset} lacks a key or the run headers")
            continue
        run = runs.setdefault((thread_id, headers.run_id), _Run(thread_id, headers.run_id))
        known = run.by_seq.get(headers.seq)
        if known is None:
            run.by_seq[headers.seq] = headers.event_type
            if headers.event_type == "RUN_FINISHED":
                run.terminal_outcome = _outcome(rec.value)
        elif known == headers.event_type:
            run.duplicates += 1
        else:
            run.conflicts.append(f"seq {headers.seq}: {known} then {headers.event_type}")
    for run in runs.values():
        _one_run(run, (run.thread_id, run.run_id) in dispatched, report)
    for ids in dispatched - set(runs):
        report.add("run_never_started",
                   f"thread {_short(ids[0])!r} run {_short(ids[1])!r}: dispatched, no event")


Boundary = tuple[str, str, int]
"""(threadId, runId, seq) of one boundary record."""


def _boundary_records(recs: Iterable[Rec], report: Report,
                      topic: str) -> dict[Boundary, tuple[str, bytes | None]]:
    """The boundary records of ``recs`` (first copy of each), with their type and bytes."""
    out: dict[Boundary, tuple[str, bytes | None]] = {}
    for rec in recs:
        headers = EventHeaders.decode(rec.headers)
        thread_id = _key_text(rec.key)
        if headers is None or thread_id is None:
            if topic == "runs":
                report.add("boundary_unattributed",
                           f"runs p{rec.partition}@{rec.offset} lacks a key or the run headers")
            continue
        if headers.event_type not in BOUNDARY_TYPES:
            if topic == "runs":
                report.add("runs_not_boundary", f"runs p{rec.partition}@{rec.offset} is a "
                                                f"{headers.event_type}")
            continue
        out.setdefault((thread_id, headers.run_id, headers.seq), (headers.event_type, rec.value))
    return out


def _boundaries(records: Records, report: Report) -> None:
    """Invariant 7: ``runs`` mirrors the boundaries of ``events``, ends both ways."""
    on_events = _boundary_records(records.events, report, "events")
    on_runs = _boundary_records(records.runs, report, "runs")
    report.counts["runs.boundaries"] += len(on_runs)
    for where, (kind, value) in on_runs.items():
        found = on_events.get(where)
        text = f"thread {_short(where[0])!r} run {_short(where[1])!r} seq {where[2]} {kind}"
        if found is None:
            report.add("end_only_on_runs" if kind in TERMINAL_TYPES else "start_only_on_runs",
                       f"{text}: on runs, not on events")
        elif found != (kind, value):
            report.add("boundary_differs", f"{text}: runs and events hold different records")
    for where, (kind, _) in on_events.items():
        if kind in TERMINAL_TYPES and where not in on_runs:
            report.add("end_only_on_events", f"thread {_short(where[0])!r} run "
                                             f"{_short(where[1])!r} seq {where[2]} {kind}: "
                                             "on events, not on runs")


def _outcome(value: bytes | None) -> str:
    try:
        raw = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return "unreadable"
    outcome = raw.get("outcome") if isinstance(raw, dict) else None
    if isinstance(outcome, dict):
        return str(outcome.get("type", "success"))
    return "success"


def _one_run(run: _Run, dispatched: bool, report: Report) -> None:
    where = f"thread {_short(run.thread_id)!r} run {_short(run.run_id)!r}"
    report.counts["runs"] += 1
    report.counts["events.duplicates"] += run.duplicates
    if not dispatched:
        report.add("run_not_dispatched", f"{where}: has events but was never dispatched")
    for conflict in run.conflicts:
        report.add("run_seq_conflict", f"{where}: {conflict}")
    seqs = sorted(run.by_seq)
    if seqs != list(range(len(seqs))):
        missing = sorted(set(range(seqs[-1] + 1)) - set(seqs))[:10]
        report.add("run_seq_gap", f"{where}: seqs {seqs[0]}..{seqs[-1]}, missing {missing}")
    types = [run.by_seq[s] for s in seqs]
    if types[0] != "RUN_STARTED":
        report.add("run_not_opened", f"{where}: first event is {types[0]}, not RUN_STARTED")
    terminals = [(i, t) for i, t in enumerate(types) if t in TERMINAL_TYPES]
    if not terminals:
        report.add("run_not_terminated", f"{where}: {len(types)} events, no terminal event")
        return
    first_index, first = terminals[0]
    after = types[first_index + 1:]
    if first == "RUN_FINISHED" and after == ["RUN_ERROR"]:
        report.counts["runs.late_error"] += 1
    elif after:
        if any(t in TERMINAL_TYPES for t in after):
            report.add("run_terminated_twice",
                       f"{where}: terminal events {[t for _, t in terminals]}")
        if any(t not in TERMINAL_TYPES for t in after):
            report.add("event_after_terminal", f"{where}: {after[:5]} after {first}")
    kind = "error" if first == "RUN_ERROR" else (run.terminal_outcome or "success")
    report.counts[f"terminal.{kind}"] += 1


def _threads(records: Records, report: Report) -> None:
    """Invariant 5 over the latest ThreadState of each thread."""
    latest: dict[str, tuple[tuple[int, int, int], Rec]] = {}
    for rec in records.threads:
        key = _key_text(rec.key)
        if key is None:
            report.add("thread_state_unkeyed", f"threads p{rec.partition}@{rec.offset}")
            continue
        order = (rec.timestamp, rec.partition, rec.offset)
        if key not in latest or latest[key][0] < order:
            latest[key] = (order, rec)
    for key, (_, rec) in latest.items():
        if rec.value is None:
            continue  # a tombstone: the thread was forgotten
        report.counts["threads"] += 1
        try:
            state = decode(ThreadState, rec.value)
        except DecodeError as exc:
            report.add("thread_state_unreadable", f"thread {_short(key)!r}: {exc}")
            continue
        report.counts[f"threads.{state.status}"] += 1
        if state.status == "running":
            report.add("thread_left_running",
                       f"thread {_short(key)!r} still running run {state.run_id!r}")
        if state.queued:
            report.add("thread_left_queued",
                       f"thread {_short(key)!r} still holds {len(state.queued)} queued request(s)")


def _executions(executions: Iterable[Execution], report: Report) -> None:
    """Invariant 6: at most one execution per (threadId, effect key)."""
    seen: Counter[tuple[str, str]] = Counter()
    for e in executions:
        report.counts["executions"] += 1
        seen[(e.thread_id, e.key)] += 1
    for (thread_id, key), n in seen.items():
        if n > 1:
            report.add("effect_repeated",
                       f"thread {_short(thread_id)!r} effect {key!r} executed {n} times")


def merge(reports: Iterable[Report]) -> Report:
    """Several reports as one (counts added, violations concatenated)."""
    out = Report()
    for r in reports:
        out.counts.update(r.counts)
        out.violations.extend(r.violations)
    return out


def count_prefix(counts: Mapping[str, Any], prefix: str) -> int:
    """Sum of the counts whose name starts with ``prefix``."""
    return sum(int(v) for k, v in counts.items() if k.startswith(prefix))
