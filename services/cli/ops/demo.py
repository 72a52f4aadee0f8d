"""``agui-relay demo``: a guided tour of interrupts and resumes on a running system.

Against a running ``make run`` (the consumer service at ``AGUI_URL``,
default http://127.0.0.1:8000, and Kafka for what the gatekeeper decided),
three short scenes, each run through ``POST /agents/{agent}`` exactly as a
front end would, with the event flow printed as ``tail`` prints it:

1. the ``approval`` agent asks before deleting files; we approve; the
   resumed run executes the tool and finishes;
2. the ``scripted`` agent asks a question that has already expired:
   answering it is refused (422 ``interrupt_expired``), cancelling it is
   the way past, and the thread moves on;
3. the ``scripted`` agent asks two questions; a resume answering only one is
   refused before anything runs (422 ``uncovered_interrupts``).

Each resume carries the thread's accumulated messages and state, rebuilt
from the events seen so far (``history``), as the AG-UI rules require.
Exit code 0 when every scene behaved as described, 1 otherwise.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.panel import Panel

from contracts.headers import EVENT_TYPE, RUN_ID
from services.agui.transcript import replay
from services.cli.ops.agui_http import RunReply, run_agent
from services.cli.ops.kafka_io import EXIT_ERROR, EXIT_OK, EXIT_REFUSED, run_command, stdout
from services.cli.ops.render import record_lines
from services.cli.ops.safe import markup
from services.kafka.reader import TopicReader
from services.kafka.records import OpsRecord, from_kafka
from services.runtime.settings import KafkaSettings


class SceneFailedError(Exception):
    """A scene did not go as narrated (the system behaved differently)."""


class Demo:
    """The tour's state: the HTTP client, Kafka settings, and each thread's events."""

    def __init__(self, client: httpx.AsyncClient, settings: KafkaSettings,
                 console: Console) -> None:
        self.client = client
        self.settings = settings
        self.console = console
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self.tag = uuid.uuid4().hex[:6]

    def say(self, text: str) -> None:
        self.console.print(f"\n[bold]»[/] {markup(text)}")

    def _show(self, thread: str, run_id: str, event: dict[str, Any]) -> None:
        stamp = event.get("timestamp")
        rec = OpsRecord("sse", "events", 0, 0,
                        stamp if isinstance(stamp, int) else int(datetime.now(UTC).timestamp()
                                                                  * 1000),
                        thread, {RUN_ID: run_id, EVENT_TYPE: str(event.get("type"))}, event)
        for line in record_lines(rec, datetime.now(UTC)):
            self.console.print(line)

    def new_input(self, thread: str, text: str, forwarded: Any = None) -> dict[str, Any]:
        return {"threadId": thread, "runId": f"run-{uuid.uuid4().hex[:8]}",
                "messages": [{"id": f"user-{uuid.uuid4().hex[:8]}", "role": "user",
                              "content": text}],
                "state": {}, "tools": [], "context": [], "forwardedProps": forwarded or {}}

    def resume_input(self, thread: str, resume: list[dict[str, Any]],
                     forwarded: Any = None) -> dict[str, Any]:
        """The next run on ``thread``: its history so far plus the resume list."""
        fields = replay(self.seen.get(thread, [])).input_fields()
        return {"threadId": thread, "runId": f"run-{uuid.uuid4().hex[:8]}",
                "tools": [], "context": [], **fields,
                "forwardedProps": forwarded or fields.get("forwardedProps") or {},
                "resume": resume}

    async def post(self, agent: str, run_input: dict[str, Any]) -> RunReply:
        thread, run_id = run_input["threadId"], run_input["runId"]
        entries = run_input.get("resume")
        extra = f"  resume entries={len(entries)}" if entries is not None else ""
        self.console.print(f"[dim]POST /agents/{markup(agent)}  thread={markup(thread)} "
                           f"run={markup(run_id)}{extra}[/]")
        reply = await run_agent(self.client, agent, run_input,
                                lambda event: self._show(thread, run_id, event))
        self.seen.setdefault(thread, []).extend(reply.events)
        if reply.problem is not None:
            problem = reply.problem
            ids = ", ".join(map(str, problem.get("interruptIds") or []))
            self.console.print(f"[bold red]HTTP {reply.status}[/] "
                               f"{markup(problem.get('code'))}: {markup(problem.get('detail'))}"
                               f"{markup(f'  [{ids}]') if ids else ''}")
        return reply

    async def kafka_decisions(self, thread: str) -> None:
        """Print the gatekeeper's decisions on ``thread``, as ``tail --decisions`` would."""
        async with TopicReader(self.settings, "agui-relay-demo") as reader:
            tp = await reader.key_partition(self.settings.topics.decisions, thread)
            records = await reader.read_all([tp])
        self.console.print(f"[dim]what the gatekeeper recorded on {markup(tp.topic)}:[/]")
        for record in records:
            rec = from_kafka(record, self.settings.topics)
            if rec.key == thread:
                for line in record_lines(rec, datetime.now(UTC)):
                    self.console.print(line)


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise SceneFailedError(what)


def outcome_of(reply: RunReply) -> str | None:
    terminal = reply.terminal or {}
    if terminal.get("type") == "RUN_ERROR":
        return "error"
    outcome = terminal.get("outcome")
    return str(outcome.get("type")) if isinstance(outcome, dict) else (
        "success" if terminal else None)


async def scene_approval(demo: Demo) -> None:
    demo.console.print(Panel("1 · An approval, answered", style="cyan"))
    thread = f"demo-approval-{demo.tag}"
    demo.say("The approval agent wants to delete files. It cannot wait mid-run for a person, "
             "so its run ENDS with an interrupt saying what it needs:")
    first = await demo.post("approval", demo.new_input(thread, "Please clean up the temp files."))
    expect(first.status == 200 and len(first.interrupts) == 1,
           f"expected one interrupt, got HTTP {first.status} {first.interrupts}")
    interrupt = first.interrupts[0]
    demo.say(f"We answer interrupt {interrupt['id']} with {{\"approved\": true}} (its "
             "responseSchema). The resuming run carries the thread's messages and state, and a "
             "resume entry for every open interrupt:")
    second = await demo.post("approval", demo.resume_input(thread, [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]))
    expect(second.status == 200 and outcome_of(second) == "success",
           f"the approved run should finish success, got HTTP {second.status} "
           f"{outcome_of(second)}")
    await demo.kafka_decisions(thread)


async def scene_expired(demo: Demo) -> None:
    demo.console.print(Panel("2 · An expired interrupt, cancelled", style="cyan"))
    thread = f"demo-expired-{demo.tag}"
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat(timespec="seconds")
    script = {"text": "Before I go on, confirm the budget.",
              "interrupts": [{"id": "confirm-budget", "reason": "confirmation",
                              "message": "Confirm the budget of 120 EUR", "expiresAt": past}]}
    demo.say("The scripted agent asks a question whose deadline has already passed:")
    first = await demo.post("scripted", demo.new_input(thread, "Plan the offsite.",
                                                       {"script": script}))
    expect(first.status == 200 and [i["id"] for i in first.interrupts] == ["confirm-budget"],
           f"expected the confirm-budget interrupt, got {first.interrupts}")
    demo.say("Answering it now is refused before anything runs — it expired:")
    late = await demo.post("scripted", demo.resume_input(thread, [
        {"interruptId": "confirm-budget", "status": "resolved", "payload": True}]))
    expect(late.status == 422 and (late.problem or {}).get("code") == "interrupt_expired",
           f"expected 422 interrupt_expired, got HTTP {late.status} {late.problem}")
    demo.say("Cancelling it is how the thread moves past an interrupt nobody answered in time:")
    moved = await demo.post("scripted", demo.resume_input(thread, [
        {"interruptId": "confirm-budget", "status": "cancelled"}]))
    expect(moved.status == 200 and outcome_of(moved) == "success",
           f"the cancelling resume should finish success, got HTTP {moved.status}")
    await demo.kafka_decisions(thread)


async def scene_partial(demo: Demo) -> None:
    demo.console.print(Panel("3 · A partial resume, refused", style="cyan"))
    thread = f"demo-partial-{demo.tag}"
    script = {"interrupts": [{"id": "pick-date", "reason": "choice", "message": "Which date?"},
                             {"id": "pick-venue", "reason": "choice", "message": "Which venue?"}]}
    demo.say("The scripted agent asks two questions at once:")
    first = await demo.post("scripted", demo.new_input(thread, "Book it.", {"script": script}))
    expect(len(first.interrupts) == 2, f"expected two interrupts, got {first.interrupts}")
    demo.say("A resume answering only the date leaves the venue uncovered. Omission is not "
             "abandonment, so it is refused before any run starts:")
    partial = await demo.post("scripted", demo.resume_input(thread, [
        {"interruptId": "pick-date", "status": "resolved", "payload": "2026-12-12"}]))
    expect(partial.status == 422 and (partial.problem or {}).get("code")
           == "uncovered_interrupts",
           f"expected 422 uncovered_interrupts, got HTTP {partial.status} {partial.problem}")
    await demo.kafka_decisions(thread)
    demo.say(f"Both questions are still open. From a terminal: agui-relay threads show {thread}; "
             f"agui-relay resume {thread} --resolve pick-date='\"2026-12-12\"' "
             "--resolve pick-venue='\"Lyon\"'")


async def tour(url: str, settings: KafkaSettings) -> int:
    console = stdout()
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(60.0, connect=5.0)) as client:
        try:
            ready = await client.get("/readyz")
        except httpx.HTTPError as exc:
            console.print(f"[red]no agui-relay at {markup(url)}[/] ({markup(exc)}); start it "
                          "with `make run` (or set AGUI_URL)")
            return EXIT_ERROR
        if ready.status_code != 200:
            console.print(f"[red]{markup(url)} is not ready[/]: {markup(ready.text)}")
            return EXIT_ERROR
        demo = Demo(client, settings, console)
        try:
            for scene in (scene_approval, scene_expired, scene_partial):
                await scene(demo)
        except SceneFailedError as exc:
            console.print(f"\n[bold red]the demo went off script:[/] {markup(exc)}")
            return EXIT_REFUSED
    console.print("\n[bold green]That was the tour.[/] Follow everything live with "
                  "`agui-relay tail --decisions`.")
    return EXIT_OK


def demo(
    url: Annotated[str, typer.Option(
        "--url", envvar="AGUI_URL", help="The consumer service.")] = "http://127.0.0.1:8000",
) -> None:
    """A guided tour of interrupts against a running `make run`.

    An approval answered, an expired interrupt cancelled, a partial resume refused.
    """
    settings = KafkaSettings()

    async def body(_stop: asyncio.Event) -> int:
        return await tour(url.rstrip("/"), settings)

    raise typer.Exit(run_command(body))
