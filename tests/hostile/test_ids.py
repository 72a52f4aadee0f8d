"""Findings 1 and 2: ids too long for the records that repeat them.

A 400,000-character ``threadId`` made decision and thread-state records the
broker refuses, and the gatekeeper retried that transaction forever: every
thread of the partition got ``504``. A 50,000-character ``runId`` with 50
interrupts made a thread state of ~2.5 MB (each open interrupt repeats the
runId) and a checkpoint the producer could not write: the worker died.
Now every id has a limit (``AGUI_MAX_ID_LENGTH``, 256), answered at the
edge with ``400 id_too_long`` naming the field, and the same records
written straight onto ``requests`` or a dispatch topic — as any client
of the cluster can — are refused or dead-lettered while the partition
and the worker go on serving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from faults.load import resume_all, run_input

from contracts import Decision
from contracts.records import REQUEST_ID_MAX_LENGTH
from hostile.client import (
    Tenant,
    approval_flow,
    finished,
    fresh,
    problem_of,
    refused,
    sized,
)
from hostile.stack import UpStack
from hostile.topics import (
    answer_to,
    dead_letter,
    envelope,
    publish,
    run_ending,
    thread_on,
)
from services.consumer.forward import FORWARDED_BY, REQUEST_ID
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.hostile

LIMIT = 256
POISON = 400_000
HUGE_RUN = 50_000


def huge_run(thread: str, run_length: int = HUGE_RUN) -> tuple[dict[str, Any], str]:
    """A run of the scripted agent raising 50 interrupts, with a ``run_length`` runId
    (and only that id long: run_input names the message after the run)."""
    run = sized("r", run_length)
    wire = run_input(thread, run, script=fifty_interrupts())
    wire["messages"][-1]["id"] = "m-1"
    return wire, run


def fifty_interrupts(id_length: int = 8) -> dict[str, Any]:
    return {"interrupts": [{"id": sized(f"i{i}", id_length), "reason": "input_required",
                            "message": "continue?"} for i in range(50)]}


def set_thread(wire: dict[str, Any], value: str) -> None:
    wire["threadId"] = value


def set_run(wire: dict[str, Any], value: str) -> None:
    wire["runId"] = value


def set_message(wire: dict[str, Any], value: str) -> None:
    wire["messages"][0]["id"] = value


def set_tool(wire: dict[str, Any], value: str) -> None:
    wire["tools"] = [{"name": value, "description": "a tool",
                      "parameters": {"type": "object"}}]


FIELDS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "threadId": set_thread, "runId": set_run, "messages/0/id": set_message,
    "tools/0/name": set_tool,
}


async def test_a_poison_thread_id_is_refused_at_the_edge(tenant_a: Tenant) -> None:
    wire = run_input(sized("poison", POISON), "run-poison")
    assert len(orjson.dumps(wire)) < 1_048_576 // 2, "the body is under every size limit"
    problem = refused(await tenant_a.run("scripted", wire), 400, "id_too_long")
    assert (problem.get("field"), problem.get("limit")) == ("threadId", LIMIT), problem


@pytest.mark.parametrize("field", list(FIELDS))
async def test_an_id_at_the_limit_runs_one_past_it_is_refused(tenant_a: Tenant,
                                                               field: str) -> None:
    thread, run = fresh("edge")
    at = run_input(thread, run)
    FIELDS[field](at, sized("at", LIMIT))
    finished(await tenant_a.run("scripted", at), "success")
    thread, run = fresh("edge")
    past = run_input(thread, run)
    FIELDS[field](past, sized("past", LIMIT + 1))
    problem = refused(await tenant_a.run("scripted", past), 400, "id_too_long")
    assert (problem.get("field"), problem.get("limit")) == (field, LIMIT), problem


async def test_a_resume_entry_id_past_the_limit_is_refused(tenant_a: Tenant) -> None:
    thread, run = fresh("entry")
    at = run_input(thread, run, resume=[{"interruptId": sized("e", LIMIT), "status": "resolved"}])
    answer = await tenant_a.run("scripted", at)
    assert (answer.problem or {}).get("code") != "id_too_long", answer.problem
    past = run_input(thread, run,
                     resume=[{"interruptId": sized("e", LIMIT + 1), "status": "resolved"}])
    problem = refused(await tenant_a.run("scripted", past), 400, "id_too_long")
    assert problem.get("field") == "resume/0/interruptId", problem


async def test_a_request_id_header_past_the_limit_is_refused_at_once(
        tenant_a: Tenant) -> None:
    """``agui-request-id`` names the RunRequest of a forwarded POST. Whoever sends it (the
    forwarding module says to strip it at the proxy), one past what a RunRequest carries
    (200 characters) is the edge's 400 naming the header (it was a 500 with a traceback)."""
    thread, run = fresh("reqid")
    forwarded = {FORWARDED_BY: "http://127.0.0.1:1"}
    at = await tenant_a.run("scripted", run_input(thread, run),
                            headers={**forwarded, REQUEST_ID: sized("q", REQUEST_ID_MAX_LENGTH)})
    assert (at.status, (at.ending or {}).get("type")) == (200, "RUN_FINISHED"), at
    past = await tenant_a.run("scripted", run_input(thread, f"{run}-2"),
                              headers={**forwarded,
                                       REQUEST_ID: sized("q", REQUEST_ID_MAX_LENGTH + 1)})
    problem = refused(past, 400, "id_too_long")
    assert (problem.get("field"), problem.get("limit")) == (REQUEST_ID, REQUEST_ID_MAX_LENGTH)


async def test_an_agent_name_past_the_limit_is_refused(tenant_a: Tenant) -> None:
    thread, run = fresh("agent")
    refused(await tenant_a.run(sized("a", LIMIT), run_input(thread, run)), 404, "unknown_agent")
    problem = refused(await tenant_a.run(sized("a", LIMIT + 1), run_input(thread, run)),
                      400, "id_too_long")
    assert problem.get("limit") == LIMIT, problem


@pytest.mark.parametrize("route", ["/threads/{t}", "/threads/{t}/runs/r/events",
                                   "/threads/{t}/runs/r/cancel"])
async def test_a_path_id_past_the_limit_is_refused(tenant_a: Tenant, route: str) -> None:
    async def ask(thread: str) -> httpx.Response:
        path = route.format(t=thread)
        if path.endswith("/cancel"):
            return await tenant_a.post(path, timeout=10.0)
        return await tenant_a.get(path, timeout=10.0)

    at = await ask(sized("t", LIMIT))
    assert at.status_code == 404, at.text[:300]
    assert problem_of(at)["code"] == "unknown_thread"
    past = await ask(sized("t", LIMIT + 1))
    assert past.status_code == 400, past.text[:300]
    assert problem_of(past)["code"] == "id_too_long"


async def test_a_poison_request_on_the_topic_is_refused_and_its_partition_decides(
        relay: UpStack, tenant_a: Tenant) -> None:
    """The poison is refused for good: a rejection naming the limit when that decision
    fits the broker, else a dead letter with the reason; never a retry."""
    settings = relay.settings
    thread = sized("poison", POISON)
    request = envelope(run_input(thread, "run-poison"))
    partition, offset = await publish(settings, settings.topics.requests, thread.encode(),
                                      orjson.dumps(request))
    assert partition == partition_for(thread, settings.partitions)
    # A normal run on a thread of the same partition, decided after the poison.
    await approval_flow(tenant_a, thread_on(partition, settings.partitions, "neighbour"))
    await assert_refused(relay, request["requestId"], (partition, offset))


async def assert_refused(relay: UpStack, request_id: str, where: tuple[int, int]) -> None:
    """The request at ``where`` on ``requests`` was rejected ``invalid_input`` or
    dead-lettered with a reason (the gatekeeper has read past it: no waiting long)."""
    answer = await answer_to(relay.settings, request_id, where, 10.0)
    assert answer is not None, f"requests p{where[0]}@{where[1]}: no decision, no dead letter"
    if isinstance(answer, Decision):
        assert (answer.verdict, answer.code) == ("rejected", "invalid_input"), answer
        assert "AGUI_MAX_ID_LENGTH" in answer.message, answer.message[:300]
    else:
        assert answer.code == "record_too_large", answer
        assert answer.reason, answer


async def test_a_huge_run_id_with_fifty_interrupts_is_refused_at_the_edge(
        tenant_a: Tenant) -> None:
    wire, _ = huge_run(fresh("bigrun")[0])
    problem = refused(await tenant_a.run("scripted", wire), 400, "id_too_long")
    assert problem.get("field") == "runId", problem


async def test_fifty_interrupts_with_ids_at_the_limit_are_raised_and_answered(
        tenant_a: Tenant) -> None:
    thread = sized("fifty", LIMIT)
    first = run_input(thread, sized("r1", LIMIT), script=fifty_interrupts(LIMIT))
    first["messages"][-1]["id"] = "m-first"  # run_input derives it from the runId
    ending = finished(await tenant_a.run("scripted", first), "interrupt")
    interrupts = ending["outcome"]["interrupts"]
    assert len(interrupts) == 50, len(interrupts)
    second = resume_all(thread, sized("r2", LIMIT), interrupts, {"ok": True})
    second["messages"][-1]["id"] = "m-second"
    finished(await tenant_a.run("scripted", second), "success")


async def test_a_huge_run_id_on_the_topics_leaves_gatekeeper_and_worker_serving(
        relay: UpStack, tenant_a: Tenant) -> None:
    settings = relay.settings
    # Onto requests: the gatekeeper refuses it (or dead-letters it), never admits it.
    thread, _ = fresh("bigrun-rq")
    request = envelope(huge_run(thread)[0])
    partition, offset = await publish(settings, settings.topics.requests, thread.encode(),
                                      orjson.dumps(request))
    # Onto the dispatch topic, as if admitted: the worker ends the run or dead-letters it.
    other, _ = fresh("bigrun-dp")
    wire, dispatch_run = huge_run(other)
    dispatch = envelope(wire, decidedAt=datetime.now(UTC).isoformat())
    topic = settings.topics.dispatch("scripted")
    d_partition, d_offset = await publish(settings, topic, other.encode(), orjson.dumps(dispatch))

    await assert_refused(relay, request["requestId"], (partition, offset))
    ending = await run_ending(settings, other, dispatch_run, 30.0)
    if ending is None:
        letter = await dead_letter(settings, topic, d_partition, d_offset, 5.0)
        assert letter is not None, "the huge dispatch got neither an ending nor a dead letter"
    else:
        assert ending["type"] == "RUN_ERROR", ending["type"]
        assert ending.get("code") == "input_too_large", ending.get("code")

    relay.check_alive()
    async with httpx.AsyncClient(timeout=5.0) as probe:
        ready = await probe.get(relay.readyz_urls()["producer"])
    assert ready.status_code == 200, ready.text[:300]
    later, run = thread_on(d_partition, settings.partitions, "later"), f"run-later-{time.time_ns()}"
    finished(await tenant_a.run("scripted", run_input(later, run)), "success")
