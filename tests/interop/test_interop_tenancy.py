"""API keys, tenancy and request limits of the consumer service, through the whole relay.

One relay for the module — gatekeeper, producer worker and consumer service
as processes — on the broker's SASL_PLAINTEXT listener (PLAIN: the password
really is in every process's environment and on the wire), with two
tenants' API keys (one from ``AGUI_API_KEYS``, one from
``AGUI_API_KEYS_FILE``), small request limits and DEBUG logs. Then:

- every route by every caller (no token, a wrong token, the owner's key,
  another tenant's key) answers 401 / 401 / 200-or-202 / 404, and another
  tenant's 404 is the very document an unknown thread gets;
- the consumer service refuses another tenant before publishing (the
  requests topic holds only the owner's requests for the thread), and the
  gatekeeper backstop refuses a foreign request written straight onto the
  topic with ``key_mismatch``, leaving the interrupts for their owner;
- two tenants starting the same new thread id at once: one 200, one 404;
- body size (declared and chunked), message count and resume length → 413;
- no API key, wrong token or SASL password appears in any process's log
  or in any process's ``/metrics``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from ag_ui.core import RunAgentInput
from relay_system import SAMPLES, Child, RelaySystem, _until_ready, service_env

from contracts import Decision, RunRequest, ThreadState, decode, encode
from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.kafka.clients import new_producer
from services.kafka.reader import TopicReader
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.interop

TOKEN_A = f"key-a-{uuid.uuid4().hex}"
TOKEN_B = f"key-b-{uuid.uuid4().hex}"
WRONG = f"not-a-key-{uuid.uuid4().hex}"
MAX_BODY = 65_536
MAX_MESSAGES = 50
MAX_RESUME = 8
WAIT_S = 30.0


@dataclass
class Secured:
    """The relay behind API keys, and what the tests need to drive and inspect it."""

    kafka: KafkaSettings
    url: str
    children: list[Child]
    password: str
    http: httpx.AsyncClient
    side_doors: list[str]
    """The gatekeeper's and the producer's health/metrics URLs (AGUI_HEALTH_PORT)."""

    def logs(self) -> str:
        return "\n".join(c.log() for c in self.children)


@pytest.fixture(scope="module")
async def relay(kafka_sasl: Any, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[Secured]:
    kafka = KafkaSettings(bootstrap_servers=kafka_sasl.bootstrap,
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_username=kafka_sasl.username,
                          sasl_password=kafka_sasl.password,
                          topic_prefix=f"sec{uuid.uuid4().hex[:10]}", partitions=4)
    await ensure_topics(kafka, tuple(SAMPLES))
    work = tmp_path_factory.mktemp("tenancy")
    keys_file = work / "api-keys"
    keys_file.write_text(f"# tenant b\n{TOKEN_B} tenant-b\n", "utf-8")
    port = launcher.free_port()
    env = service_env(
        kafka, AGUI_HTTP_PORT=str(port), AGUI_LOG_LEVEL="DEBUG",
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", KAFKA_SASL_MECHANISM="PLAIN",
        KAFKA_SASL_USERNAME=kafka_sasl.username, KAFKA_SASL_PASSWORD=kafka_sasl.password,
        AGUI_API_KEYS=f"{TOKEN_A}=tenant-a", AGUI_API_KEYS_FILE=str(keys_file),
        AGUI_MAX_BODY_BYTES=str(MAX_BODY), AGUI_MAX_MESSAGES=str(MAX_MESSAGES),
        AGUI_MAX_RESUME_ENTRIES=str(MAX_RESUME))
    side_ports = {"services.gatekeeper": launcher.free_port(),
                  "services.producer": launcher.free_port()}
    children = [Child(module, work / f"{module.rsplit('.', 1)[-1]}.log",
                      {**env, "AGUI_HEALTH_PORT": str(side_ports.get(module, 0))})
                for module in ("services.gatekeeper", "services.producer", "services.consumer")]
    url = f"http://127.0.0.1:{port}"
    try:
        for child in children:
            await child.start()
        await _until_ready(RelaySystem(kafka, url, children))
        async with httpx.AsyncClient(base_url=url, timeout=WAIT_S) as http:
            yield Secured(kafka, url, children, kafka_sasl.password, http,
                          [f"http://127.0.0.1:{p}" for p in side_ports.values()])
    finally:
        for child in children:
            await child.stop()


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


CALLERS: dict[str, str | None] = {"none": None, "wrong": WRONG, "other": TOKEN_B,
                                  "owner": TOKEN_A}
"""In this order, so the owner's resume (which closes the interrupt) comes last."""


def wire(thread: str, run: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run or f"run-{uuid.uuid4().hex[:8]}",
            "messages": [{"id": "m1", "role": "user", "content": "hi"}], **extra}


def interrupting(thread: str, run: str) -> dict[str, Any]:
    return wire(thread, run, forwardedProps={"script": {
        "text": "needs approval", "interrupts": [{"id": "i1", "reason": "tool_approval"}]}})


def resuming(thread: str) -> dict[str, Any]:
    return wire(thread, resume=[{"interruptId": "i1", "status": "resolved",
                                 "payload": {"approved": True}}])


def events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in body.split(b"\n") if line.startswith(b"data: ")]


async def start_interrupted(relay: Secured, token: str) -> tuple[str, str]:
    """A thread of ``token``'s tenant whose first run ended interrupted on ``i1``."""
    thread, run = f"own-{uuid.uuid4().hex[:8]}", "run-1"
    posted = await relay.http.post("/agents/scripted", json=interrupting(thread, run),
                                   headers=bearer(token))
    assert posted.status_code == 200, posted.text
    assert events(posted.content)[-1]["outcome"]["type"] == "interrupt"
    async with asyncio.timeout(WAIT_S):
        while True:
            got = await relay.http.get(f"/threads/{thread}", headers=bearer(token))
            if got.status_code == 200 and got.json()["status"] == "interrupted":
                return thread, run
            await asyncio.sleep(0.05)


async def call(relay: Secured, route: str, thread: str, run: str,
               token: str | None) -> httpx.Response:
    headers = bearer(token)
    if route == "POST new thread":
        return await relay.http.post("/agents/scripted", json=wire(f"new-{uuid.uuid4().hex}"),
                                     headers=headers)
    if route == "POST resume":
        return await relay.http.post("/agents/scripted", json=resuming(thread), headers=headers)
    if route == "GET thread":
        return await relay.http.get(f"/threads/{thread}", headers=headers)
    if route == "GET replay":
        return await relay.http.get(f"/threads/{thread}/runs/{run}/events", headers=headers)
    assert route == "POST cancel"
    return await relay.http.post(f"/threads/{thread}/runs/{run}/cancel", headers=headers)


EXPECTED = {
    "POST new thread": {"none": 401, "wrong": 401, "other": 200, "owner": 200},
    "POST resume": {"none": 401, "wrong": 401, "other": 404, "owner": 200},
    "GET thread": {"none": 401, "wrong": 401, "other": 404, "owner": 200},
    "GET replay": {"none": 401, "wrong": 401, "other": 404, "owner": 200},
    "POST cancel": {"none": 401, "wrong": 401, "other": 404, "owner": 202},
}


async def test_every_route_by_every_caller(relay: Secured) -> None:
    thread, run = await start_interrupted(relay, TOKEN_A)
    unknown = await relay.http.get("/threads/no-such-thread", headers=bearer(TOKEN_B))
    seen: dict[str, dict[str, int]] = {}
    bodies: dict[tuple[str, str], httpx.Response] = {}
    for route in EXPECTED:
        seen[route] = {}
        for caller, token in CALLERS.items():
            response = await call(relay, route, thread, run, token)
            seen[route][caller] = response.status_code
            bodies[route, caller] = response
    assert seen == EXPECTED

    for route in EXPECTED:
        for caller in ("none", "wrong"):
            refused = bodies[route, caller]
            assert refused.json()["code"] == "unauthorized"
            assert refused.headers["www-authenticate"].startswith("Bearer")
        if route != "POST new thread":  # another tenant's thread is not there for it
            hidden = bodies[route, "other"].json()
            assert hidden == {**unknown.json(), "detail": f"no thread {thread!r} is known"}
    resumed = events(bodies["POST resume", "owner"].content)
    assert resumed[-1]["type"] == "RUN_FINISHED"
    assert "i1=resolved" in "".join(e.get("delta", "") for e in resumed)
    assert bodies["POST cancel", "owner"].json()["requestedBy"] == "tenant-a"
    assert events(bodies["GET replay", "owner"].content)[0]["type"] == "RUN_STARTED"

    async with TopicReader(relay.kafka, "tenancy-check") as reader:
        tp = await reader.key_partition(relay.kafka.topics.requests, thread)
        published = [decode(RunRequest, r.value) for r in await reader.read_all([tp])
                     if r.key == thread.encode()]
    assert [r.principal for r in published] == ["tenant-a", "tenant-a"]  # b's never left


async def test_a_new_thread_belongs_to_the_tenant_that_started_it(relay: Secured) -> None:
    thread = f"mine-{uuid.uuid4().hex[:8]}"
    posted = await relay.http.post("/agents/scripted", json=wire(thread), headers=bearer(TOKEN_B))
    assert posted.status_code == 200
    async with asyncio.timeout(WAIT_S):
        while (await relay.http.get(f"/threads/{thread}",
                                    headers=bearer(TOKEN_B))).status_code != 200:
            await asyncio.sleep(0.05)
    assert (await relay.http.get(f"/threads/{thread}", headers=bearer(TOKEN_A))).status_code == 404
    again = await relay.http.post("/agents/scripted", json=wire(thread), headers=bearer(TOKEN_A))
    assert (again.status_code, again.json()["code"]) == (404, "unknown_thread")


async def test_two_tenants_racing_for_one_new_thread_id(relay: Secured) -> None:
    for _ in range(3):
        thread = f"race-{uuid.uuid4().hex[:8]}"
        a, b = await asyncio.gather(
            relay.http.post("/agents/scripted", json=wire(thread), headers=bearer(TOKEN_A)),
            relay.http.post("/agents/scripted", json=wire(thread), headers=bearer(TOKEN_B)))
        assert sorted([a.status_code, b.status_code]) == [200, 404], (a.text, b.text)
        loser = a if a.status_code == 404 else b
        assert loser.json()["code"] == "unknown_thread"


async def test_the_gatekeeper_refuses_a_foreign_request_written_onto_the_topic(
        relay: Secured) -> None:
    thread, _ = await start_interrupted(relay, TOKEN_A)
    stolen = RunRequest(request_id=f"req-{uuid.uuid4()}", agent="scripted",
                        input=RunAgentInput.model_validate(resuming(thread)),
                        submitted_at=datetime.now(UTC), principal="tenant-b")
    producer = new_producer(relay.kafka, "tenancy-intruder")
    await producer.start()
    try:
        await producer.send_and_wait(relay.kafka.topics.requests, encode(stolen),
                                     key=thread.encode())
    finally:
        await producer.stop()
    decision = await decision_of(relay, thread, stolen.request_id)
    assert (decision.verdict, decision.code) == ("rejected", "key_mismatch")
    assert "another principal" in decision.message
    owner = await relay.http.get(f"/threads/{thread}", headers=bearer(TOKEN_A))
    assert owner.json()["status"] == "interrupted"  # the interrupt is still the owner's
    async with TopicReader(relay.kafka, "tenancy-state") as reader:
        tp = await reader.key_partition(relay.kafka.topics.threads, thread)
        states = [decode(ThreadState, r.value) for r in await reader.read_all([tp])
                  if r.key == thread.encode() and r.value is not None]
    assert {s.principal for s in states} == {"tenant-a"}
    resumed = await relay.http.post("/agents/scripted", json=resuming(thread),
                                    headers=bearer(TOKEN_A))
    assert resumed.status_code == 200


async def decision_of(relay: Secured, thread: str, request_id: str) -> Decision:
    async with TopicReader(relay.kafka, "tenancy-decisions") as reader:
        tp = await reader.key_partition(relay.kafka.topics.decisions, thread)
        async with asyncio.timeout(WAIT_S):
            while True:
                for record in await reader.read_all([tp]):
                    decision = decode(Decision, record.value)
                    if decision.request_id == request_id:
                        return decision
                await asyncio.sleep(0.1)


async def test_request_limits_answer_413_after_authentication(relay: Secured) -> None:
    thread = f"big-{uuid.uuid4().hex[:8]}"
    oversize = orjson.dumps(wire(thread, forwardedProps={"pad": "x" * MAX_BODY}))

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(oversize), 8192):
            yield oversize[start:start + 8192]

    many = [{"id": f"m{i}", "role": "user", "content": "hi"} for i in range(MAX_MESSAGES + 1)]
    entries = [{"interruptId": f"i{i}", "status": "cancelled"} for i in range(MAX_RESUME + 1)]
    as_json = {**bearer(TOKEN_A), "Content-Type": "application/json"}
    cases = {
        "declared": await relay.http.post("/agents/scripted", content=oversize, headers=as_json),
        "chunked": await relay.http.post("/agents/scripted", content=chunked(), headers=as_json),
        "messages": await relay.http.post("/agents/scripted", headers=bearer(TOKEN_A),
                                          json={**wire(thread), "messages": many}),
        "resume": await relay.http.post("/agents/scripted", headers=bearer(TOKEN_A),
                                        json=wire(thread, resume=entries)),
    }
    anonymous = await relay.http.post("/agents/scripted", content=oversize)
    at_limit = await relay.http.post("/agents/scripted", headers=bearer(TOKEN_A),
                                     json={**wire(thread), "messages": many[:MAX_MESSAGES]})
    assert "content-length" not in cases["chunked"].request.headers
    for name, response in cases.items():
        assert response.status_code == 413, (name, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "payload_too_large"
    assert f"exceeds {MAX_BODY} bytes" in cases["declared"].json()["detail"]
    assert f"messages has {MAX_MESSAGES + 1} items" in cases["messages"].json()["detail"]
    assert f"resume has {MAX_RESUME + 1} items" in cases["resume"].json()["detail"]
    assert anonymous.status_code == 401  # who asks is settled before the body is read
    assert at_limit.status_code == 200
    assert events(at_limit.content)[-1]["type"] == "RUN_FINISHED"


async def test_no_secret_in_any_log_or_in_metrics(relay: Secured) -> None:
    for token in (None, WRONG, TOKEN_A, TOKEN_B, f"{TOKEN_A}x"):
        await relay.http.get("/threads/anything", headers=bearer(token))
        await relay.http.post("/agents/scripted", json=wire(f"s-{uuid.uuid4().hex[:8]}"),
                              headers=bearer(token))
    metrics = await relay.http.get("/metrics")  # open: AGUI_METRICS_TOKEN is not set
    assert metrics.status_code == 200
    assert 'agui_consumer_auth_failures_total{reason="invalid"}' in metrics.text
    exposed = [metrics.text]
    async with httpx.AsyncClient(timeout=WAIT_S) as side:
        for url in relay.side_doors:
            other = await side.get(f"{url}/metrics")
            assert other.status_code == 200
            exposed.append(other.text)
    await asyncio.sleep(1.0)  # let the children flush their last lines
    logs = relay.logs()
    assert "authentication on: 2 API keys for 2 tenants" in logs
    assert '"level":"debug"' in logs.replace(" ", "")
    assert "aiokafka" in logs  # the client's DEBUG trace, SASL exchange included, is there
    for secret in (TOKEN_A, TOKEN_B, WRONG, relay.password):
        assert secret not in logs, f"a secret is in the logs: {_around(logs, secret)}"
        for text in exposed:
            assert secret not in text, "a secret is in /metrics"


def _around(text: str, secret: str) -> str:
    at = text.find(secret)
    return text[max(0, at - 300):at].replace(secret, "<SECRET>")
