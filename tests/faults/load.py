"""Bounded load for the fault scenarios: interrupt → resume flows, over Kafka or HTTP.

A *flow* is one thread's conversation: a first run that ends with an
interrupt (the ``scripted`` agent told to raise one, or the ``approval``
agent asking to delete files), then a resume answering every interrupt the
run raised (approving, for ``approval``: one side effect each). Flows run
``concurrency`` at a time until ``flows`` are done or ``duration_s`` ran
out; every wait has a deadline, so load always stops by itself.

- ``KafkaLoad`` writes RunRequests straight onto ``requests`` (as any
  service may) and learns decisions and endings from a ``Follower``. A
  decision that does not come in ``resend_s`` is asked for again by sending
  the *same* record (same requestId): the gatekeeper must answer a retry
  with the same decision and never dispatch twice.
- ``HttpLoad`` speaks AG-UI to the consumer service (``POST
  /agents/{agent}``, SSE back), spreading flows over the instances given. A
  connection cut by a killed instance is followed up on Kafka (did the run
  start and end?) and, if the request never got through, sent again to
  another instance.

Traffic goes to loopback only (the broker and services the harness started).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
from ag_ui.core import RunAgentInput

from contracts import Decision, RunRequest, encode
from faults.follower import Ending, Follower
from faults.sse import read_stream
from services.kafka.clients import AIOKafkaProducer, KafkaError, new_producer
from services.kafka.transactions import stop_producer
from services.runtime.settings import KafkaSettings

TERMINALS = ("RUN_FINISHED", "RUN_ERROR")


@dataclass
class LoadStats:
    """What the load did and saw; printed in each scenario's summary line."""

    flows: int = 0
    flows_completed: int = 0
    requests: int = 0
    resends: int = 0
    send_errors: int = 0
    gave_up: int = 0
    transport_errors: int = 0
    approvals_admitted: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    decision_latency_s: list[float] = field(default_factory=list)
    run_latency_s: list[float] = field(default_factory=list)
    """From the admission seen to the terminal event seen."""

    def line(self) -> str:
        lat = sorted(self.decision_latency_s)
        p50 = lat[len(lat) // 2] if lat else 0.0
        worst = lat[-1] if lat else 0.0
        runs = max(self.run_latency_s, default=0.0)
        return (
            f"flows {self.flows_completed}/{self.flows}, requests {self.requests} "
            f"(resent {self.resends}, send errors {self.send_errors}, transport errors "
            f"{self.transport_errors}, gave up {self.gave_up}), verdicts "
            f"{dict(self.verdicts)}, outcomes {dict(self.outcomes)}"
            + (f", http {dict(sorted(self.statuses.items()))}" if self.statuses else "")
            + f", decision latency p50 {p50 * 1000:.0f} ms max {worst:.1f} s"
            + (f", longest run {runs:.1f} s" if self.run_latency_s else "")
        )


def run_input(thread_id: str, run_id: str, *, script: dict[str, Any] | None = None,
              resume: list[dict[str, Any]] | None = None, text: str = "go",
              props: dict[str, Any] | None = None,
              history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A RunAgentInput in wire form (``history``: messages before the new user message)."""
    forwarded = dict(props or {})
    if script is not None:
        forwarded["script"] = script
    wire: dict[str, Any] = {
        "threadId": thread_id, "runId": run_id, "state": {}, "tools": [], "context": [],
        "messages": [*(history or []), {"id": f"m-{run_id}", "role": "user", "content": text}],
        "forwardedProps": forwarded,
    }
    if resume is not None:
        wire["resume"] = resume
    return wire


def scripted_first(thread_id: str, run_id: str, interrupt_id: str,
                   delay_ms: int) -> dict[str, Any]:
    script = {"interrupts": [{"id": interrupt_id, "reason": "input_required",
                              "message": "continue?"}],
              "text": "thinking", "delayMs": delay_ms}
    return run_input(thread_id, run_id, script=script)


def resume_all(thread_id: str, run_id: str, interrupts: Sequence[dict[str, Any]],
               payload: Any, props: dict[str, Any] | None = None) -> dict[str, Any]:
    """A run resolving every interrupt with ``payload``; tool calls they gate go in the history."""
    entries = [{"interruptId": i.get("id"), "status": "resolved", "payload": payload}
               for i in interrupts]
    calls = [{"id": i["toolCallId"], "type": "function",
              "function": {"name": "delete_files", "arguments": '{"paths": ["/tmp/x"]}'}}
             for i in interrupts if isinstance(i.get("toolCallId"), str)]
    history = ([{"id": f"a-{run_id}", "role": "assistant", "content": "May I?",
                 "toolCalls": calls}] if calls else [])
    return run_input(thread_id, run_id, resume=entries, text="answered", props=props,
                     history=history)


def new_ids(kind: str, n: int) -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"{kind}-{n}-{tag}", f"run-{n}-{tag}-a", f"run-{n}-{tag}-b"


async def run_flows(flow: Callable[[int], Awaitable[None]], flows: int, concurrency: int,
                    duration_s: float, until: asyncio.Event | None = None) -> None:
    """Run ``flow(i)`` for i in range(flows), ``concurrency`` at a time, within ``duration_s``.

    With ``until``, no new flow starts once it is set (flows under way finish).
    """
    deadline = time.monotonic() + duration_s
    counter = itertools.count()

    async def worker() -> None:
        while time.monotonic() < deadline and not (until is not None and until.is_set()):
            i = next(counter)
            if i >= flows:
                return
            await flow(i)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


class KafkaLoad:
    """Flows whose requests go straight onto ``requests``."""

    def __init__(self, settings: KafkaSettings, follower: Follower, *,
                 resend_s: float = 8.0, step_s: float = 90.0, delay_ms: int = 30,
                 approval_every: int = 3, execution_delay_ms: int = 0) -> None:
        self.settings = settings
        self.follower = follower
        self.resend_s = resend_s
        self.step_s = step_s
        self.delay_ms = delay_ms
        self.approval_every = approval_every
        self.execution_delay_ms = execution_delay_ms
        """``approval``: how long each execution takes (kills land inside it)."""
        self.stats = LoadStats()
        self._producer: AIOKafkaProducer | None = None

    async def __aenter__(self) -> KafkaLoad:
        self._producer = new_producer(self.settings, "agui-faults-load", linger_ms=2)
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._producer is not None:  # bounded: a scenario that failed with the broker
            await stop_producer(self._producer)  # down must fail, not wait on it for ever

    async def send(self, thread_id: str, value: bytes) -> bool:
        assert self._producer is not None
        try:
            await self._producer.send_and_wait(self.settings.topics.requests, value,
                                               key=thread_id.encode())
        except KafkaError:
            self.stats.send_errors += 1
            return False
        return True

    async def submit(self, agent: str, wire: dict[str, Any]) -> Decision | None:
        """Publish a request; resend the same record until decided or the step deadline."""
        request = RunRequest(request_id=str(uuid.uuid4()), agent=agent,
                             input=RunAgentInput.model_validate(wire),
                             submitted_at=datetime.now(UTC))
        thread_id, value = wire["threadId"], encode(request)
        started = time.monotonic()
        deadline = started + self.step_s
        first = True
        while time.monotonic() < deadline:
            if not first:
                self.stats.resends += 1
            first = False
            self.stats.requests += 1
            if not await self.send(thread_id, value):
                await asyncio.sleep(1.0)
                continue
            wait = min(self.resend_s, max(deadline - time.monotonic(), 0.0))
            decision = await self.follower.decision(thread_id, request.request_id, wait)
            if decision is not None:
                self.stats.decision_latency_s.append(time.monotonic() - started)
                self.stats.verdicts[decision.code or decision.verdict] += 1
                return decision
        self.stats.gave_up += 1
        return None

    async def step(self, agent: str, wire: dict[str, Any]) -> tuple[bool, Ending | None]:
        """Submit; when admitted, wait for the run's ending. (admitted, ending)."""
        decision = await self.submit(agent, wire)
        if decision is None or decision.verdict != "admitted":
            return False, None
        admitted_at = time.monotonic()
        ending = await self.follower.ending(wire["threadId"], wire["runId"], self.step_s)
        if ending is None:
            self.stats.gave_up += 1
            return True, None
        self.stats.run_latency_s.append(max(ending.seen_at - admitted_at, 0.0))
        self.stats.outcomes[ending.outcome] += 1
        return True, ending

    async def flow(self, n: int) -> None:
        """One thread: interrupt, then a resume answering every interrupt raised."""
        self.stats.flows += 1
        approval = self.approval_every > 0 and n % self.approval_every == 0
        agent = "approval" if approval else "scripted"
        thread_id, first_run, second_run = new_ids(agent, n)
        if approval:
            first = run_input(thread_id, first_run, text="please clean up the temp files")
        else:
            first = scripted_first(thread_id, first_run, f"int-{n}", self.delay_ms)
        _, ending = await self.step(agent, first)
        if ending is None or not ending.interrupt_ids:
            return
        payload = {"approved": True} if approval else {"answer": n}
        props = {"executionDelayMs": self.execution_delay_ms} if self.execution_delay_ms else None
        admitted, second = await self.step(
            agent, resume_all(thread_id, second_run, ending.interrupts, payload, props))
        if approval and admitted:
            self.stats.approvals_admitted += 1
        if second is not None:
            self.stats.flows_completed += 1

    async def run(self, flows: int, concurrency: int, duration_s: float,
                  until: asyncio.Event | None = None) -> LoadStats:
        await run_flows(self.flow, flows, concurrency, duration_s, until)
        return self.stats


@dataclass(frozen=True, slots=True)
class HttpRun:
    """What one POST /agents/{agent} gave back."""

    status: int
    problem: dict[str, Any] | None = None
    events: tuple[dict[str, Any], ...] = ()
    error: str | None = None
    content_type: str = ""

    @property
    def ending(self) -> dict[str, Any] | None:
        last = self.events[-1] if self.events else None
        return last if last is not None and last.get("type") in TERMINALS else None


def pool_limits(max_connections: int) -> httpx.Limits:
    """Connection limits whose idle connections expire before the server closes them.

    uvicorn closes a connection idle for 5 s (``timeout_keep_alive``), and
    httpx keeps one for 5 s by default: a request sent on a connection at the
    moment the server closes it fails with a bare ``ReadError``, a transport
    race, not an answer of the service (seen once in 5,000 fuzz requests).
    """
    return httpx.Limits(max_connections=max_connections, keepalive_expiry=2.0)


async def post_run(client: httpx.AsyncClient, url: str, agent: str, body: bytes,
                   timeout_s: float = 60.0) -> HttpRun:
    """POST a run and read its SSE stream to the end (or the problem document)."""
    try:
        async with client.stream(
            "POST", f"{url}/agents/{agent}", content=body, timeout=timeout_s,
            headers={"content-type": "application/json", "accept": "text/event-stream"},
        ) as response:
            if response.status_code != 200:
                raw = await response.aread()
                try:
                    problem = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    problem = {"raw": raw[:200].decode("utf-8", "replace")}
                return HttpRun(response.status_code,
                               problem if isinstance(problem, dict) else {"raw": problem},
                               content_type=response.headers.get("content-type", ""))
            events = [e async for e in read_stream(response)]
            return HttpRun(200, events=tuple(events),
                           content_type=response.headers.get("content-type", ""))
    except httpx.HTTPError as exc:
        return HttpRun(0, error=f"{type(exc).__name__}: {exc}")
    except orjson.JSONDecodeError as exc:
        return HttpRun(200, error=f"a data frame is not JSON: {exc}")


class HttpLoad:
    """Flows through the consumer service's HTTP face, spread over its instances."""

    def __init__(self, urls: Sequence[str], follower: Follower, *, delay_ms: int = 30,
                 approval_every: int = 3, step_s: float = 60.0) -> None:
        self.urls = list(urls)
        self.follower = follower
        self.delay_ms = delay_ms
        self.approval_every = approval_every
        self.step_s = step_s
        self.stats = LoadStats()
        self.client = httpx.AsyncClient(limits=pool_limits(400),
                                        timeout=httpx.Timeout(step_s))

    async def __aenter__(self) -> HttpLoad:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def step(self, n: int, agent: str,
                   wire: dict[str, Any]) -> list[dict[str, Any]] | None:
        """POST one run (falling back to Kafka and another instance on a cut connection).

        Returns the interrupts the run ended with ([] for any other ending),
        or None when the run was refused or never ended.
        """
        body = orjson.dumps(wire)
        thread_id, run_id = wire["threadId"], wire["runId"]
        for attempt in range(len(self.urls) + 1):
            url = self.urls[(n + attempt) % len(self.urls)]
            self.stats.requests += 1
            started = time.monotonic()
            result = await post_run(self.client, url, agent, body, self.step_s)
            self.stats.statuses[result.status] += 1
            if result.status == 200 and result.ending is not None:
                self.stats.decision_latency_s.append(time.monotonic() - started)
                self.stats.verdicts["admitted"] += 1
                return self._ended(Ending(str(result.ending["type"]), result.ending,
                                          time.monotonic()))
            if result.status not in (0, 200, 503, 504):
                code = (result.problem or {}).get("code", str(result.status))
                self.stats.verdicts[str(code)] += 1
                return None
            self.stats.transport_errors += 1
            # Cut, unavailable or undecided: did the run start anyway? Follow it on Kafka.
            ending = await self.follower.ending(thread_id, run_id, 15.0)
            if ending is not None:
                return self._ended(ending)
        self.stats.gave_up += 1
        return None

    def _ended(self, ending: Ending) -> list[dict[str, Any]]:
        self.stats.outcomes[ending.outcome] += 1
        return ending.interrupts

    async def flow(self, n: int) -> None:
        self.stats.flows += 1
        approval = self.approval_every > 0 and n % self.approval_every == 0
        agent = "approval" if approval else "scripted"
        thread_id, first_run, second_run = new_ids(f"h{agent}", n)
        if approval:
            first = run_input(thread_id, first_run, text="please clean up the temp files")
        else:
            first = scripted_first(thread_id, first_run, f"int-{n}", self.delay_ms)
        interrupts = await self.step(n, agent, first)
        if not interrupts:
            return
        payload = {"approved": True} if approval else {"answer": n}
        second = await self.step(n, agent, resume_all(thread_id, second_run, interrupts, payload))
        if second is not None:
            self.stats.flows_completed += 1
            if approval:
                self.stats.approvals_admitted += 1

    async def run(self, flows: int, concurrency: int, duration_s: float,
                  until: asyncio.Event | None = None) -> LoadStats:
        await run_flows(self.flow, flows, concurrency, duration_s, until)
        return self.stats
