"""The decision matrix through the real topics, read back with read_committed.

The test plays the consumer service (RunRequests on ``requests``) and the
producer worker (run boundaries on ``runs``, with their headers), and reads
``decisions``, ``dispatch.<agent>`` and ``deadletter`` as an independent
checker. Each scenario has its own thread, and they run concurrently.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from gatekeeper_harness import GatekeeperProcess, Topics, cancelled, resolved, run_request

from contracts import Decision, encode
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

PAST = "2020-01-01T00:00:00Z"
FUTURE = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
TRACE = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def verdict(d: Decision) -> tuple[str, str | None, tuple[str, ...]]:
    return d.verdict, d.code, tuple(d.interrupt_ids or ())


async def admit(topics: Topics, thread: str, run: str, request_id: str | None = None) -> None:
    d = await topics.decide(run_request(request_id or f"{thread}-{run}", thread, run))
    assert d.verdict == "admitted", d.message


async def interrupts_and_resumes(topics: Topics) -> None:
    t = "t-interrupts"
    await admit(topics, t, "r1")
    await topics.started(t, "r1")
    await topics.finished(
        t,
        "r1",
        Interrupt(id="a", reason="approve", expires_at=PAST),
        Interrupt(id="b", reason="approve", expires_at=FUTURE),
        Interrupt(id="c", reason="choose", expires_at="whenever"),
    )
    cases = [
        ("no-resume", None, ("rejected", "uncovered_interrupts", ("a", "b", "c"))),
        (
            "dup",
            [*resolved("a", "b", "c"), *cancelled("b")],
            ("rejected", "duplicate_entry", ("b",)),
        ),
        ("unknown", resolved("a", "b", "c", "z"), ("rejected", "unknown_interrupt", ("z",))),
        ("partial", resolved("b"), ("rejected", "uncovered_interrupts", ("a", "c"))),
        ("expired", resolved("a", "b", "c"), ("rejected", "interrupt_expired", ("a",))),
        ("full", [*cancelled("a"), *resolved("b", "c")], ("admitted", None, ("a", "b", "c"))),
        ("racing", cancelled("a", "b", "c"), ("rejected", "thread_busy", ())),
    ]
    for name, resume, _ in cases:  # all published first: decided in order, one thread
        await topics.request(run_request(f"{t}-{name}", t, f"r-{name}", resume=resume))
    for name, _, expected in cases:
        d = await topics.decision(f"{t}-{name}")
        assert verdict(d) == expected, (name, d.message)
    full = await topics.decision(f"{t}-full")
    assert full.warnings is not None
    assert "whenever" in full.warnings[0]
    (dispatch,) = topics.dispatched(t, "r-full")
    assert dispatch.input.resume == [*cancelled("a"), *resolved("b", "c")]
    assert dispatch.warnings == full.warnings
    # a retried requestId: the same decision again, never a second dispatch
    await topics.request(run_request(f"{t}-full", t, "r-full", resume=resolved("a", "b", "c")))
    await topics.until(lambda: len(topics.decisions[f"{t}-full"]) == 2, what="the retry's answer")
    again = topics.decisions[f"{t}-full"][1]
    assert again == full.model_copy(update={"replayed": True})
    assert len(topics.dispatched(t, "r-full")) == 1


async def late_run_error_keeps_interrupts(topics: Topics) -> None:
    t = "t-late-error"
    await admit(topics, t, "r1")
    await topics.finished(t, "r1", Interrupt(id="a", reason="approve"))
    await topics.failed(t, "r1")  # the late RUN_ERROR after an interrupting RUN_FINISHED
    d = await topics.decide(run_request(f"{t}-plain", t, "r2"))
    assert verdict(d) == ("rejected", "uncovered_interrupts", ("a",))
    d = await topics.decide(run_request(f"{t}-resume", t, "r3", resume=resolved("a")))
    assert d.verdict == "admitted"


async def run_error_correlated_by_header(topics: Topics) -> None:
    t = "t-run-error"
    await admit(topics, t, "r1")
    await topics.failed(t, "other-run")
    assert (await topics.decide(run_request(f"{t}-2", t, "r2"))).code == "thread_busy"
    await topics.failed(t, "r1")
    assert (await topics.decide(run_request(f"{t}-3", t, "r3"))).verdict == "admitted"


async def busy_and_duplicate_runs(topics: Topics) -> None:
    t = "t-busy"
    await admit(topics, t, "r1")
    assert (await topics.decide(run_request(f"{t}-busy", t, "r2"))).code == "thread_busy"
    assert (await topics.decide(run_request(f"{t}-same", t, "r1"))).code == "duplicate_run_id"
    await topics.finished(t, "r1")
    assert (await topics.decide(run_request(f"{t}-old", t, "r1"))).code == "duplicate_run_id"
    assert (await topics.decide(run_request(f"{t}-new", t, "r2"))).verdict == "admitted"
    strict = await topics.decide(run_request("t-idle-resume", "t-idle", "r1", resume=resolved("x")))
    assert verdict(strict) == ("rejected", "unknown_interrupt", ("x",))


async def refused_before_any_thread(topics: Topics) -> None:
    schema = orjson.loads(encode(run_request("bad-schema", "t-bad", "r1")))
    del schema["input"]["messages"]
    await topics.raw_request(orjson.dumps(schema), "t-bad")
    await topics.request(run_request("bad-agent", "t-bad", "r2", agent="nobody"))
    await topics.request(run_request("bad-key", "t-bad", "r3"), key="t-elsewhere")
    big = run_request("too-big", "t-bad", "r4")
    big.input.forwarded_props = {"blob": "x" * 20_000}
    await topics.request(big)
    await topics.raw_request(b"\x00 not a request at all", "t-bad")
    codes = {
        rid: (await topics.decision(rid)).code
        for rid in ("bad-schema", "bad-agent", "bad-key", "too-big")
    }
    assert codes == {
        "bad-schema": "invalid_input",
        "bad-agent": "invalid_input",
        "bad-key": "key_mismatch",
        "too-big": "invalid_input",
    }
    assert "'nobody'" in topics.decisions["bad-agent"][0].message
    await topics.until(lambda: len(topics.dead_letters) == 1, what="the dead letter")
    (letter,) = topics.dead_letters
    assert (letter.source_topic, letter.key, letter.code) == (
        topics.topics.requests,
        "t-bad",
        "invalid_json",
    )
    assert letter.value == "\x00 not a request at all"
    assert not [d for d in topics.dispatches if d.input.thread_id == "t-bad"]


async def admission_carries_the_trace(topics: Topics) -> None:
    request = run_request("traced", "t-trace", "r1")
    await topics.request(request, headers=[("traceparent", TRACE)])
    assert (await topics.decision("traced")).verdict == "admitted"
    # the gatekeeper's hop: the request's trace id, a span id of its own
    (traced,) = [v for k, v in topics.decision_headers["traced"] if k == "traceparent"]
    assert traced[:36] == TRACE[:36]
    assert traced[36:53] != TRACE[36:53]
    (dispatch,) = topics.dispatched("t-trace", "r1")
    assert dispatch.input == request.input
    assert dispatch.request_id == "traced"


async def test_the_decision_matrix_through_the_topics(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any]
) -> None:
    await in_process(kafka.model_copy(update={"max_record_bytes": 16_384}))
    scenarios = [
        interrupts_and_resumes,
        late_run_error_keeps_interrupts,
        run_error_correlated_by_header,
        busy_and_duplicate_runs,
        refused_before_any_thread,
        admission_carries_the_trace,
    ]
    for scenario in scenarios:  # sequential keeps failures readable; each is quick
        await scenario(topics)
    counts = {rid: len(ds) for rid, ds in topics.decisions.items() if rid != "t-interrupts-full"}
    assert set(counts.values()) == {1}, "every other request was decided exactly once"
    run_ids = [d.input.run_id for d in topics.dispatches]
    assert len({(d.input.thread_id, d.input.run_id) for d in topics.dispatches}) == len(run_ids)


async def test_enqueue_and_lenient_policies_through_the_topics(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any]
) -> None:
    await in_process(
        kafka,
        AGUI_BUSY_POLICY="enqueue",
        AGUI_UNKNOWN_ENTRY_POLICY="lenient",
        AGUI_GATEKEEPER_QUEUE_LIMIT=1,
    )
    t = "t-queue"
    await admit(topics, t, "r1")
    queued = await topics.decide(run_request(f"{t}-2", t, "r2"))
    assert queued.verdict == "queued"
    full = await topics.decide(run_request(f"{t}-3", t, "r3"))
    assert full.code == "thread_busy"
    assert "queue is full" in full.message
    await topics.finished(t, "r1")
    await topics.until(lambda: len(topics.decisions[f"{t}-2"]) == 2, what="the queued decision")
    assert topics.decisions[f"{t}-2"][1].verdict == "admitted"
    assert [d.request_id for d in topics.dispatched(t, "r2")] == [f"{t}-2"]

    lenient = await topics.decide(
        run_request("t-lenient-1", "t-lenient", "r1", resume=resolved("ghost"))
    )
    assert verdict(lenient) == ("admitted", None, ("ghost",))
    (dispatch,) = [d for d in topics.dispatches if d.input.thread_id == "t-lenient"]
    assert dispatch.warnings == lenient.warnings
    assert dispatch.warnings is not None
    assert "ghost" in dispatch.warnings[0]


@pytest.mark.parametrize("batch_ms", [0, 900])
async def test_a_resume_sent_right_after_its_interrupt_never_meets_a_busy_thread(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess],
    batch_ms: int,
) -> None:
    """Events can lag requests in a poll (a streaming run writes many records);
    the gatekeeper must not decide a resume before it has read the interrupt
    that was published before it. The gatekeeper is stopped while the runs
    stream, so on restart their requests and events are all waiting at once.
    Batching too (``AGUI_GATEKEEPER_BATCH_MS`` 900: each fetch is held until it fills
    or 900 ms pass, longer than the 500 ms a request waits for ``runs``)."""
    gatekeeper = processes(kafka, AGUI_GATEKEEPER_BATCH_MS=str(batch_ms))
    gatekeeper.start()
    await gatekeeper.ready()
    threads = [f"t-burst-{n}" for n in range(4)]
    for t in threads:
        await admit(topics, t, "r1")
    assert gatekeeper.terminate() == 0
    for t in threads:
        await topics.deltas(t, "r1", 2500, "x" * 1000)  # 2.5 MB streamed before the end
        await topics.finished(t, "r1", Interrupt(id="a", reason="approve"))
        await topics.request(run_request(f"{t}-resume", t, "r2", resume=resolved("a")))
    gatekeeper.start()
    decided = [await topics.decision(f"{t}-resume", within=60) for t in threads]
    assert [d.verdict for d in decided] == ["admitted"] * len(threads), [d.message for d in decided]
