"""The interrupt lifecycle end to end: a default TTL stamped by the runtime, the expiry
policy cancelling a lapsed thread exactly once, and who answered reaching the agent.

A real gatekeeper (a child process, ``AGUI_ON_EXPIRY=cancel``) and a real worker
hosting the sample agents; the test writes requests as the consumer service would
and reads every output topic with ``read_committed``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from ag_ui.core import ResumeEntry
from gatekeeper_harness import GatekeeperProcess, Topics
from lifecycle_harness import admitted, interrupted, request
from producer_harness import Relay, in_process_worker

from contracts import EventHeaders, RunRequest
from contracts.records import EXPIRY_ANSWERER, PRINCIPAL_KEY
from services.agui.expiry import read_expiry
from services.agui.jsdate import to_epoch_ms
from services.gatekeeper.expiry_policy import request_id_for, run_id_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_a_default_ttl_is_stamped_and_the_lapsed_approval_is_cancelled_once(
        kafka: KafkaSettings, topics: Topics, events: Relay,
        processes: Callable[..., GatekeeperProcess], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGUI_DEFAULT_INTERRUPT_TTL_APPROVAL", "4s")
    gatekeeper = processes(kafka, AGUI_ON_EXPIRY="cancel")
    gatekeeper.start()
    await gatekeeper.ready()
    async with in_process_worker(kafka, "approval,scripted"):
        asked = await topics.decide(request("q1", "th", "r1", "approval",
                                            props={"paths": ["/a"], "approvers": ["alice"]}))
        assert (asked.verdict, asked.principal) == ("admitted", "alice")
        before = to_epoch_ms(datetime.now(UTC))
        (wire,) = await interrupted(topics, events, "th", "r1")
        stamped = read_expiry(wire["expiresAt"]).epoch_ms
        assert stamped is not None
        assert before + 4000 - 1000 <= stamped <= to_epoch_ms(datetime.now(UTC)) + 4000
        assert wire["expiresAt"].endswith("Z")
        state = topics.threads["th"]
        assert [o.interrupt.expires_at for o in state.open_interrupts] == [wire["expiresAt"]]

        expiry_id = request_id_for("r1")
        decision = await topics.decision(expiry_id, 30)
        assert decision.verdict == "admitted", decision.message
        assert (decision.policy, decision.principal) == ("expiry", "alice")
        assert "expiry policy" in decision.message
        assert to_epoch_ms(decision.decided_at) >= stamped
        resumed = await events.finished(run_id_for("r1"), 60)
        (dispatch,) = topics.dispatched("th", run_id_for("r1"))
        (entry,) = dispatch.input.resume or []
        assert (entry.interrupt_id, entry.status) == (wire["id"], "cancelled")
        assert (entry.metadata or {})[PRINCIPAL_KEY] == EXPIRY_ANSWERER
        roles = [m.role for m in dispatch.input.messages]
        assert roles[:2] == ["user", "assistant"]  # the history the interrupted run left
        result = next(w for w in resumed.wire if w["type"] == "TOOL_CALL_RESULT")
        assert orjson.loads(result["content"]) == {
            "refused": True, "status": "cancelled", "by": EXPIRY_ANSWERER}
        assert resumed.outcome == {"type": "success"}
        resumed.assert_conformant()

        late = await topics.decide(request("q-late", "th", "r-late", "approval",
                                           resume=[ResumeEntry(interrupt_id=wire["id"],
                                                               status="resolved",
                                                               payload={"approved": True})]))
        assert (late.verdict, late.code) == ("rejected", "interrupt_expired"), late.message
    assert [d.request_id for d in admitted(topics, "th")] == ["q1", expiry_id]
    assert len([d for d in topics.dispatches if d.input.thread_id == "th"]) == 2
    assert gatekeeper.terminate() == 0


async def test_the_principal_reaches_the_agent_which_refuses_an_approval_from_a_non_approver(
        kafka: KafkaSettings, topics: Topics, events: Relay,
        processes: Callable[..., GatekeeperProcess]) -> None:
    """Two keys of one tenant (``tenant-a#alice``, ``tenant-a#bob``): either may answer
    on the tenant's thread, each is recorded as itself, and only Alice may approve."""
    gatekeeper = processes(kafka)
    gatekeeper.start()
    await gatekeeper.ready()
    async with in_process_worker(kafka, "approval"):
        for thread, answerer in (("t-ok", "alice"), ("t-no", "bob")):
            await topics.decide(request(f"{thread}-1", thread, f"{thread}-r1", "approval",
                                        principal="tenant-a", key_name="alice",
                                        props={"paths": ["/a"], "approvers": ["tenant-a#alice"]}))
            (wire,) = await interrupted(topics, events, thread, f"{thread}-r1")
            forged = ResumeEntry(interrupt_id=wire["id"], status="resolved",  # claims alice
                                 payload={"approved": True},
                                 metadata={PRINCIPAL_KEY: "tenant-a#alice"})
            answer = await topics.decide(request(f"{thread}-2", thread, f"{thread}-r2",
                                                 "approval", principal="tenant-a",
                                                 key_name=answerer, resume=[forged]))
            assert (answer.verdict, answer.principal, answer.key_name) == (
                "admitted", "tenant-a", answerer)
            view = await events.finished(f"{thread}-r2", 60)
            (dispatch,) = topics.dispatched(thread, f"{thread}-r2")
            assert dispatch.key_name == answerer
            assert ((dispatch.input.resume or [])[0].metadata or {})[PRINCIPAL_KEY] == \
                f"tenant-a#{answerer}"
            assert topics.threads[thread].principal == "tenant-a"
            result = orjson.loads(next(w for w in view.wire
                                       if w["type"] == "TOOL_CALL_RESULT")["content"])
            if answerer == "alice":
                assert list(result) == ["deleted"]  # executed (its paths come from history)
            else:  # the right tenant, the wrong person
                assert result == {"refused": True, "status": "resolved", "by": "tenant-a#bob",
                                  "reason": "not an approver"}
    assert gatekeeper.terminate() == 0


def script(thread: str, run_id: str, expires_at: str) -> RunRequest:
    return request(f"{thread}-ask", thread, run_id, "scripted", props={"script": {
        "interrupts": [{"id": "i1", "reason": "approve", "expiresAt": expires_at},
                       {"id": "i2", "reason": "approve", "expiresAt": expires_at}]}})


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def lapse_threads(topics: Topics, events: Relay, threads: list[str],
                        at: datetime, step: timedelta = timedelta(0)) -> None:
    for n, thread in enumerate(threads):
        await topics.request(script(thread, f"{thread}-r1", iso(at + n * step)))
    for thread in threads:
        await interrupted(topics, events, thread, f"{thread}-r1")


def once_each(topics: Topics, events: Relay, threads: list[str]) -> dict[str, str]:
    """Per thread: exactly one admitted resume, dispatched once, and who it was."""
    winners: dict[str, str] = {}
    for thread in threads:
        resumes = [d for d in admitted(topics, thread) if d.request_id != f"{thread}-ask"]
        assert len(resumes) == 1, (thread, [(d.request_id, d.message) for d in resumes])
        (resume,) = resumes
        assert len(topics.dispatched(thread, resume.run_id or "")) == 1
        assert len([d for d in topics.dispatches if d.input.thread_id == thread]) == 2
        winners[thread] = resume.request_id
        assert {d.verdict for d in topics.decisions[resume.request_id]} == {"admitted"}
    return winners


async def test_a_gatekeeper_killed_at_the_moment_of_expiry_resumes_each_thread_once(
        kafka: KafkaSettings, topics: Topics, events: Relay,
        processes: Callable[..., GatekeeperProcess]) -> None:
    threads = [f"k{n}" for n in range(12)]
    first = processes(kafka, "gk-a", AGUI_ON_EXPIRY="cancel")
    first.start()
    await first.ready()
    async with in_process_worker(kafka, "scripted"):
        at = datetime.now(UTC) + timedelta(seconds=8)
        # deadlines 80 ms apart, the kill in their midst: some threads resumed and
        # committed before it, some sent and not decided, some not sent at all
        await lapse_threads(topics, events, threads, at, timedelta(milliseconds=80))
        await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()) + 0.5)
        first.kill()
        sent = [line for line in first.log_lines() if "every interrupt of run" in
                str(line.get("msg", ""))]
        await asyncio.sleep(0.5)  # what it committed is read by now
        before = {t for t in threads if admitted(topics, t)[1:]}
        second = processes(kafka, "gk-b", AGUI_ON_EXPIRY="cancel")
        second.start()
        await second.ready()
        await topics.until(lambda: all(len(admitted(topics, t)) == 2 for t in threads), 60,
                           "every thread resumed by the expiry policy")
        for thread in threads:
            view = await events.finished(run_id_for(f"{thread}-r1"), 60)
            assert view.text() == "i1=cancelled\ni2=cancelled"
        await asyncio.sleep(2)  # a second copy, were there one, would be decided by now
    winners = once_each(topics, events, threads)
    assert set(winners.values()) == {request_id_for(f"{t}-r1") for t in threads}
    again = sum(len(topics.decisions[w]) - 1 for w in winners.values())
    print(f"before the kill: {len(sent)} of {len(threads)} sent, {len(before)} admitted; "
          f"{again} sent again and answered with the same decision, not dispatched")
    assert second.terminate() == 0


async def test_a_client_racing_the_expiry_policy_never_makes_two_resumes(
        kafka: KafkaSettings, topics: Topics, events: Relay,
        processes: Callable[..., GatekeeperProcess]) -> None:
    threads = [f"c{n}" for n in range(16)]
    gatekeeper = processes(kafka, AGUI_ON_EXPIRY="cancel")
    gatekeeper.start()
    await gatekeeper.ready()
    async with in_process_worker(kafka, "scripted"):
        at = datetime.now(UTC) + timedelta(seconds=6)
        await lapse_threads(topics, events, threads, at)
        await asyncio.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))
        for n, thread in enumerate(threads):  # cancel both, as the policy would, racing it
            if n % 4 == 0:
                await asyncio.sleep(0.02)
            await topics.request(request(f"{thread}-client", thread, f"{thread}-rc",
                                         "scripted", principal="alice",
                                         resume=[ResumeEntry(interrupt_id=i, status="cancelled")
                                                 for i in ("i1", "i2")]))
        deadline = time.monotonic() + 60
        await topics.until(lambda: all(topics.decisions.get(f"{t}-client")
                                       and topics.decisions.get(request_id_for(f"{t}-r1"))
                                       for t in threads), 60, "both requests decided")
        assert time.monotonic() < deadline
        winners = once_each(topics, events, threads)
        for thread, winner in winners.items():
            loser = (request_id_for(f"{thread}-r1") if winner == f"{thread}-client"
                     else f"{thread}-client")
            (lost,) = topics.decisions[loser]
            assert lost.verdict == "rejected", lost
    print("client first:", sum(w.endswith("-client") for w in winners.values()),
          "of", len(threads))
    assert gatekeeper.terminate() == 0


async def test_a_state_delta_that_would_explode_the_history_leaves_the_expiry_resume_whole(
        kafka: KafkaSettings, topics: Topics, events: Relay,
        processes: Callable[..., GatekeeperProcess]) -> None:
    """A 400-byte ``STATE_DELTA`` on ``events`` whose 18 ``copy`` ops each double ``/a``
    made the expirer rebuild a 4 MB state in its event loop for every try, and the resume
    carrying it never fit a record: retried for ever, the thread never resumed, the
    gatekeeper's group rebalanced under the blocked loop (found by probing). The delta
    is refused by the history's bound, and the resume goes with the state as it was."""
    gatekeeper = processes(kafka, AGUI_ON_EXPIRY="cancel")
    gatekeeper.start()
    await gatekeeper.ready()
    original = {"a": list(range(8))}
    expires = (datetime.now(UTC) + timedelta(seconds=4)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    asked = request("qb", "tb", "rb", "scripted",
                    props={"script": {"interrupts": [{"id": "q", "reason": "input",
                                                      "expiresAt": expires}]}})
    asked.input.state = original
    async with in_process_worker(kafka, "scripted"):
        assert (await topics.decide(asked)).verdict == "admitted"
        await interrupted(topics, events, "tb", "rb")
        bomb = {"type": "STATE_DELTA",
                "delta": [{"op": "copy", "from": "/a", "path": "/a/-"}] * 18}
        await (await events.producer.send(
            kafka.topics.events, orjson.dumps(bomb), key=b"tb",
            headers=EventHeaders("rb", "STATE_DELTA", "scripted", 90).encode()))
        decision = await topics.decision(request_id_for("rb"), 60)
        assert decision.verdict == "admitted", decision.message
        await events.finished(run_id_for("rb"), 60)
        (dispatch,) = topics.dispatched("tb", run_id_for("rb"))
        assert dispatch.input.state == original
    assert gatekeeper.terminate() == 0
