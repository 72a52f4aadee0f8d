"""``agui-relay resume THREAD``: answer or cancel a thread's open interrupts from a terminal.

Reads what the topics say about the thread (its state on ``threads``, its
events), builds the resume list from ``--resolve ID=JSON`` /
``--cancel ID`` / ``--cancel-expired`` / ``--cancel-all`` and refuses
locally, saying why, what the gatekeeper would refuse (``resume_plan``).
The new ``RunAgentInput`` carries the same threadId, a new runId, and the
thread's accumulated messages and state rebuilt from its events
(``history``), so the agent continues exactly as a front end would have
made it. The request goes to ``requests``; the command then prints the
gatekeeper's decision and follows the admitted run until it closes.
Exit codes: 0 admitted, 1 refused (locally or by the gatekeeper), 2 error.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from rich.markup import escape

from contracts import RunRequest, encode
from contracts.codec import to_wire, validation_detail
from contracts.headers import AGENT
from contracts.records import OPS_REQUEST_PREFIX
from services.agui.transcript import MAX_STATE_BYTES, Replayer, Transcript, replay
from services.cli.ops.kafka_io import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_REFUSED,
    publish,
    reading,
    run_command,
    select_partitions,
    stderr,
    stdout,
)
from services.cli.ops.resume_plan import (
    Plan,
    Problem,
    ResumeOptions,
    parse_resolve,
    plan_resume,
)
from services.cli.ops.safe import markup
from services.cli.ops.tail import emit
from services.cli.ops.watch import Watcher
from services.kafka.reader import Start, TopicReader
from services.kafka.records import OpsRecord
from services.kafka.thread_log import BOUNDARIES, ThreadRecords, read_thread
from services.runtime.settings import KafkaSettings


class RefusedError(Exception):
    """The resume cannot be sent; the message says why and what to do."""

    def __init__(self, message: str, shown: str | None = None) -> None:
        super().__init__(message)
        self.shown = markup(message) if shown is None else shown
        """The message as rich markup, inert: ``markup``'s, but for the commands in it."""


def refused(problems: Sequence[Problem]) -> RefusedError:
    """Every problem, one a line, each hint's commands printed as they are: already
    a shell's exact and inert words, which ``safe`` would change (a doubled backslash)."""
    def line(p: Problem, text: Callable[[str], str], hint: Callable[[str], str]) -> str:
        return f"  {text(p.code)}: {text(p.message)}" + (f"; {hint(p.hint)}" if p.hint else "")
    return RefusedError("\n".join(line(p, str, str) for p in problems),
                        "\n".join(line(p, markup, escape) for p in problems))


def build_request(found: ThreadRecords, plan: Plan, agent: str | None, *,
                  max_state_bytes: int = MAX_STATE_BYTES,
                  transcript: Transcript | None = None) -> RunRequest:
    """The RunRequest continuing ``found``'s thread with ``plan``'s resume list: its
    ``transcript`` as folded while reading, else rebuilt from ``found.events`` (its state
    up to ``max_state_bytes``, the records' limit)."""
    state = found.state
    assert state is not None
    chosen = agent or state.agent or next(
        (e.headers[AGENT] for e in reversed(found.events) if AGENT in e.headers), None)
    if not chosen:
        raise RefusedError(f"no agent known for thread {found.thread_id}: pass --agent NAME")
    if transcript is None:
        transcript = replay((e.value for e in found.events if isinstance(e.value, dict)),
                            max_state_bytes=max_state_bytes)
    if transcript.last_run_id is None:
        transcript.warnings.append(f"no events of thread {found.thread_id} left on the events "
                                   "topic (retention?): resuming without its message history")
    for warning in transcript.warnings:
        stderr().print(f"[yellow]warning:[/] {markup(warning)}")
    wire: dict[str, Any] = {
        "threadId": found.thread_id,
        "runId": f"run-{uuid.uuid4().hex[:16]}",
        **transcript.input_fields(),
        "resume": [to_wire(e) for e in plan.entries],
    }
    try:
        run_input = RunAgentInput.model_validate(wire)
    except ValidationError as exc:
        raise RefusedError("the thread's history does not make a valid RunAgentInput: "
                      f"{validation_detail(exc)}") from exc
    return RunRequest(request_id=f"{OPS_REQUEST_PREFIX}{uuid.uuid4()}", agent=chosen,
                      input=run_input, submitted_at=datetime.now(UTC),
                      principal=state.principal)


def plan_for(found: ThreadRecords, options: ResumeOptions) -> Plan:
    """The checked resume list, or ``RefusedError`` listing every problem."""
    if found.state is None:
        raise RefusedError(f"thread {found.thread_id} has no state on the threads topic "
                      "(unknown thread, or the gatekeeper has not seen it)")
    plan = plan_resume(found.state, options, datetime.now(UTC))
    for warning in plan.warnings:
        stderr().print(f"[yellow]warning:[/] {markup(warning)}")
    if not plan.ok:
        raise refused(plan.problems)
    return plan


def _announce(request: RunRequest, partition: int, offset: int, settings: KafkaSettings,
              as_json: bool) -> None:
    if as_json:
        rec = OpsRecord(settings.topics.requests, "requests", partition, offset,
                        int(request.submitted_at.timestamp() * 1000), request.input.thread_id,
                        {}, to_wire(request))
        sys.stdout.write(rec.ndjson() + "\n")
        return
    entries = ", ".join(f"{e.interrupt_id}={e.status}" for e in request.input.resume or [])
    stdout().print(f"→ resuming [bold]{markup(request.input.thread_id)}[/] with agent "
                   f"{markup(request.agent)}: new run [cyan]{markup(request.input.run_id)}[/], "
                   f"{markup(entries)} "
                   f"[dim](request {request.request_id}, "
                   f"{len(request.input.messages)} messages)[/]")


async def submit_and_follow(settings: KafkaSettings, request: RunRequest, *, follow: bool,
                            as_json: bool, within_s: float, stop: asyncio.Event) -> int:
    """Send ``request``, print its decision, follow the admitted run; the exit code."""
    thread_id = request.input.thread_id
    topics = settings.topics
    async with TopicReader(settings, "agui-relay-resume") as reader:
        partitions = await select_partitions(reader, [(topics.decisions, thread_id),
                                                      (topics.events, thread_id)])
        await reader.assign(partitions, Start.end())
        watcher = Watcher(reader, settings, stop, lambda rec: emit(rec, as_json))
        try:
            partition, offset = await publish(settings, topics.requests, thread_id,
                                              encode(request))
            _announce(request, partition, offset, settings, as_json)
            decision = await watcher.decision(request.request_id, within_s)
            if decision is None:
                if not stop.is_set():
                    stderr().print(f"[red]no decision within {within_s:g}s[/] (is the gatekeeper "
                                   f"running?); request {request.request_id} stays on "
                                   f"{markup(topics.requests)} and will be decided when it runs")
                return EXIT_ERROR
            if decision.fields.get("verdict") != "admitted":
                return EXIT_REFUSED
            if follow:
                await watcher.run_end(thread_id, request.input.run_id)
        finally:
            await watcher.close()
    return EXIT_OK


def resume(
    thread_id: Annotated[str, typer.Argument(help="The interrupted thread.")],
    resolve: Annotated[list[str] | None, typer.Option(
        "--resolve", help="Answer an interrupt: ID=JSON (repeatable), checked against its "
        "responseSchema. An ID may hold '=' (base64 padding): the answer starts after the "
        "first '=' at which the rest is JSON, e.g. YWJjZA===true.")] = None,
    cancel: Annotated[list[str] | None, typer.Option(
        "--cancel", help="Abandon an interrupt by id (repeatable).")] = None,
    cancel_expired: Annotated[bool, typer.Option(
        "--cancel-expired", help="Cancel every open interrupt past its expiry.")] = False,
    cancel_all: Annotated[bool, typer.Option(
        "--cancel-all", help="Cancel every open interrupt not resolved explicitly.")] = False,
    agent: Annotated[str | None, typer.Option(
        "--agent", "-a", help="Agent to run (default: the thread's).")] = None,
    follow: Annotated[bool, typer.Option(
        "--follow/--no-follow", help="Follow the resumed run until it closes.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON records.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the RunRequest instead of sending it.")] = False,
    within_s: Annotated[float, typer.Option(
        "--timeout", help="Seconds to wait for the decision.")] = 30.0,
) -> None:
    """Resume an interrupted thread: every open interrupt resolved or cancelled."""
    settings = KafkaSettings()
    if not 0 < within_s < float("inf"):  # also refuses nan: checked before anything is sent
        stderr().print(f"[red]error:[/] --timeout {within_s}: give a number of seconds above 0")
        raise typer.Exit(EXIT_ERROR)
    try:
        options = ResumeOptions(resolve=[parse_resolve(item) for item in resolve or []],
                                cancel=list(cancel or []), cancel_expired=cancel_expired,
                                cancel_all=cancel_all)
    except ValueError as exc:
        stderr().print(f"[red]error:[/] {markup(exc)}")
        raise typer.Exit(EXIT_ERROR) from exc

    async def body(stop: asyncio.Event) -> int:
        replayer = Replayer(max_state_bytes=settings.max_record_bytes)
        with reading(f"thread {markup(thread_id)}") as progress:  # folded, never held whole
            found = await read_thread(
                settings, thread_id, decisions=False, event_types=BOUNDARIES, stop=stop,
                progress=progress,
                fold=lambda batch: replayer.feed(e.value for e in batch
                                                 if isinstance(e.value, dict)))
        try:
            request = build_request(found, plan_for(found, options), agent,
                                    transcript=replayer.done())
        except RefusedError as exc:
            stderr().print(f"[bold red]refused, nothing sent[/] — thread {markup(thread_id)}:\n"
                           f"{exc.shown}")
            return EXIT_REFUSED
        if dry_run:
            sys.stdout.write(encode(request).decode() + "\n")
            return EXIT_OK
        return await submit_and_follow(settings, request, follow=follow, as_json=as_json,
                                       within_s=within_s, stop=stop)

    raise typer.Exit(run_command(body))
