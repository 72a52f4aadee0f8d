"""Records another writer put on the relay's own topics (found by probing, 2026-12-04).

A request keyed with bytes that are not UTF-8 but decode, with replacement,
to its own threadId (``"\\ufffd..."``) once passed the key check: the record
sits on the partition of its raw bytes, where the thread has no state, so a
run was admitted past the thread's open interrupt. Now the key must be the
threadId's bytes, and such a request is rejected ``key_mismatch``.

A record on ``events`` that is not a JSON object, with a live run's
headers and the sequence number of that run's end, once cut the client's
stream with a traceback (its line break made the framing parse it), or
took the end's sequence number so the run never ended. Now it is skipped
before it is sequenced: the client gets the run whole, and its end.

A record on ``events`` under a pipeline's child thread that is not an event of
it (not JSON, a tombstone, a JSON value that is no object) once failed every
resume of the parent (the worker reads the child thread's history to continue
it): the resume ended RUN_ERROR, which closed the parent's interrupt while the
child stayed interrupted, and the approval was lost. Now it is skipped.

A ``RUN_STARTED`` on ``runs`` whose value is not JSON: the gatekeeper read
a start from its headers alone and adopted it as a run, which no worker
ever dispatched and none could end, so every later request on the thread
was ``409 thread_busy`` for good and nothing was dead-lettered. Now every
boundary's value is checked and such a record is dead-lettered
``invalid_event``, changing nothing.

A state on ``threads`` keyed otherwise than its threadId was served by the
consumer service under its key; now it is skipped with a warning.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from urllib.parse import quote

import orjson
import pytest
from faults.load import resume_all, run_input

from contracts.headers import AGENT, EVENT_TYPE, RUN_ID, SCHEMA, SEQ, EventHeaders, header_value
from hostile.client import Tenant, finished, fresh
from hostile.stack import UpStack
from hostile.topics import dead_letter, decision_for, envelope, first_match, publish, thread_on
from services.kafka.partitioning import partition_for

pytestmark = pytest.mark.hostile


async def test_a_key_that_only_decodes_to_the_thread_id_is_key_mismatch_and_the_interrupt_holds(
        relay: UpStack, tenant_a: Tenant) -> None:
    settings = relay.settings
    while True:  # the key's partition another than the thread's: where it has no state
        tag = uuid.uuid4().hex[:10]
        thread, lossy_key = f"\ufffd{tag}", b"\xff" + tag.encode()
        if partition_for(thread, settings.partitions) != partition_for(lossy_key,
                                                                        settings.partitions):
            break
    assert lossy_key.decode("utf-8", "replace") == thread
    first = await tenant_a.run("approval", run_input(thread, f"{tag}-r1", text="Clean up /tmp"))
    interrupts = finished(first, "interrupt")["outcome"]["interrupts"]

    request = envelope(run_input(thread, f"{tag}-r2"), agent="approval")  # no resume
    await publish(settings, settings.topics.requests, lossy_key, orjson.dumps(request))
    decision = await decision_for(settings, request["requestId"], 30.0)
    assert decision is not None, "no decision on the request keyed with other bytes"
    assert (decision.verdict, decision.code) == ("rejected", "key_mismatch"), decision
    assert repr(lossy_key) in (decision.message or "")

    # the thread is as it was: its interrupt open, answered by the next run
    resumed = await tenant_a.run("approval", resume_all(thread, f"{tag}-r3", interrupts,
                                                        {"approved": True}))
    finished(resumed, "success")
    relay.check_alive()


async def test_a_record_that_is_not_json_on_events_never_reaches_the_client(
        relay: UpStack, tenant_a: Tenant) -> None:
    settings = relay.settings
    thread, run = fresh("notjson")
    streaming = asyncio.create_task(tenant_a.run(
        "scripted", run_input(thread, run, script={"text": "live", "delayMs": 4000})))
    partition = partition_for(thread, settings.partitions)

    def message_end(record: object) -> bool:
        headers = getattr(record, "headers", ())
        return (header_value(headers, RUN_ID) == run
                and header_value(headers, EVENT_TYPE) == "TEXT_MESSAGE_END")

    end = await first_match(settings, settings.topics.events, [partition], message_end, 30.0)
    assert end is not None, "the run's message never ended"
    terminal_seq = int(header_value(end.headers, SEQ) or "0") + 1
    await publish(settings, settings.topics.events, thread.encode(), b"\xff\nnot json",
                  headers=[(RUN_ID, run.encode()), (EVENT_TYPE, b"RUN_FINISHED"),
                           (AGENT, b"scripted"), (SEQ, str(terminal_seq).encode()),
                           (SCHEMA, b"1")])

    result = await streaming
    assert [e["type"] for e in result.events] == [
        "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "RUN_FINISHED"], result
    finished(result, "success")
    relay.check_alive()


@pytest.mark.parametrize(("stray", "with_child_run"), [
    (b"not json", False), (None, False), (b"[1, 2]", True)],
    ids=["not-json", "tombstone", "array-as-the-childs-event"])
async def test_a_stray_record_on_a_child_thread_neither_fails_the_resume_nor_loses_the_approval(
        relay: UpStack, tenant_a: Tenant, stray: bytes | None, with_child_run: bool) -> None:
    settings = relay.settings
    parent, run = fresh("pipe-stray")
    ending = finished(await tenant_a.run("pipeline_parent",
                                         run_input(parent, run, text="the report")),
                      "interrupt")
    interrupts = ending["outcome"]["interrupts"]
    child = interrupts[0]["metadata"]["agui-relay.child"]
    headers = ([(RUN_ID, child["runId"].encode()), (EVENT_TYPE, b"TEXT_MESSAGE_END"),
                (AGENT, b"pipeline_child"), (SEQ, b"999"), (SCHEMA, b"1")]
               if with_child_run else [("x-other-team", b"1")])
    await publish(settings, settings.topics.events, child["threadId"].encode(), stray, headers)

    resumed = await tenant_a.run("pipeline_parent",
                                 resume_all(parent, f"{run}-2", interrupts, {"approved": True}))
    finished(resumed, "success")  # was RUN_ERROR agent_error JSONDecodeError / TypeError
    for _ in range(50):  # the child's end reaches its thread state a moment later
        view = await tenant_a.get(f"/threads/{quote(child['threadId'], safe='')}")
        assert view.status_code == 200, view.text[:300]
        if view.json()["status"] == "idle":
            break
        await asyncio.sleep(0.2)
    assert (view.json()["status"], view.json().get("openInterrupts") or []) == ("idle", []), (
        view.text[:400])  # the answer reached the child: it is no longer interrupted
    relay.check_alive()


async def test_a_state_delta_that_would_explode_leaves_the_inbox_history_bounded(
        relay: UpStack, tenant_a: Tenant) -> None:
    """One 400-byte ``STATE_DELTA`` whose 18 ``copy`` ops each double ``/a``: the inbox's
    thread route rebuilt a 4 MB state (20 ops: 400 MB, the instance frozen for seconds;
    found by probing). The history's state is bounded by the record limit, so the delta
    is refused and the state shown is the one before it."""
    settings = relay.settings
    thread, run = fresh("bomb")
    finished(await tenant_a.run("scripted", run_input(thread, run)))
    ghost = f"{run}-x"
    original = {"a": list(range(8))}
    start = {"type": "RUN_STARTED", "threadId": thread, "runId": ghost,
             "input": {"threadId": thread, "runId": ghost, "messages": [], "state": original}}
    bomb = {"type": "STATE_DELTA", "delta": [{"op": "copy", "from": "/a", "path": "/a/-"}] * 18}
    for seq, event in enumerate((start, bomb)):
        await publish(settings, settings.topics.events, thread.encode(), orjson.dumps(event),
                      EventHeaders(ghost, str(event["type"]), "scripted", seq).encode())
    history = await tenant_a.get(f"/interrupts/threads/{quote(thread, safe='')}")
    assert history.status_code == 200, history.text[:300]
    assert history.json()["input"]["state"] == original
    relay.check_alive()


@pytest.mark.parametrize("value", [b"not json", b"\xff\xfe\x80{"], ids=["text", "not-utf8"])
async def test_a_run_started_on_runs_that_is_not_json_is_dead_lettered_not_adopted(
        relay: UpStack, tenant_a: Tenant, value: bytes) -> None:
    settings = relay.settings
    thread = thread_on(5 % settings.partitions, settings.partitions, "ghost")
    headers = EventHeaders(f"{thread}-ghost", "RUN_STARTED", "scripted", 0).encode()
    where = await publish(settings, settings.topics.runs, thread.encode(), value, headers)
    letter = await dead_letter(settings, settings.topics.runs, *where, within_s=30)
    assert letter is not None, "the start was neither used nor dead-lettered"
    assert (letter.code, letter.service) == ("invalid_event", "gatekeeper"), letter
    assert "RUN_STARTED record's value is not JSON" in letter.reason, letter.reason
    # the thread was never held: a run on it is admitted and finishes
    finished(await tenant_a.run("scripted", run_input(thread, f"{thread}-r1"), timeout_s=30))
    relay.check_alive()


async def test_a_thread_state_keyed_for_another_thread_is_not_served_under_its_key(
        relay: UpStack, tenant_a: Tenant) -> None:
    settings = relay.settings
    key = thread_on(5 % settings.partitions, settings.partitions, "tkey")
    marker = thread_on(5 % settings.partitions, settings.partitions, "tmark")

    def state(thread_id: str) -> bytes:
        return orjson.dumps({"schemaVersion": 1, "threadId": thread_id, "status": "idle",
                             "principal": "tenant-a", "openInterrupts": [], "queued": [],
                             "recentRunIds": [], "recentDecisions": []})

    await publish(settings, settings.topics.threads, key.encode(), state(f"{key}-other"))
    await publish(settings, settings.topics.threads, marker.encode(), state(marker))
    deadline = time.monotonic() + 30
    while (await tenant_a.get(f"/threads/{marker}")).status_code != 200:  # read past it
        assert time.monotonic() < deadline, "the thread view never read the marker state"
        await asyncio.sleep(0.1)
    view = await tenant_a.get(f"/threads/{key}")
    assert view.status_code == 404, view.text[:300]
    relay.check_alive()
