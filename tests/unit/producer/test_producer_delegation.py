"""Child runs of a pipeline: threads no other tenant can predict, the parent's principal.

A child thread is ``<parent>/<key>-<token>``, the token derived from the
parent run's request id: the same for the same request (a worker restart
finds the same child), different for every other request, never the bare
``<parent>/<key>`` another tenant could create first. A resumed parent run
continues the child its interrupts name; an id past AGUI_MAX_ID_LENGTH
fails the parent run with a code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from ag_ui.core import Interrupt
from producer_support import make_input, resolved, runner_for

from contracts.headers import EVENT_TYPE, RUN_ID, SEQ
from contracts.limits import InputLimits
from services.producer.context import RunContext
from services.producer.delegation import (
    CHILD_METADATA,
    ChildEvent,
    Delegation,
    DelegationError,
    child_event,
    child_thread_id,
)
from services.producer.errors import RecordTooLargeError, RunFailedError
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

REQUEST = "req-6f1c2a9e-5b7d-4f0e-9a61-0c3b2d4e5f60"


def test_child_thread_is_the_parent_key_and_a_token_of_the_request() -> None:
    child = child_thread_id("t1", "review", REQUEST)
    assert re.fullmatch(r"t1/review-[0-9a-f]{16}", child)
    assert child_thread_id("t1", "review", REQUEST) == child  # stable: restarts find it
    assert child_thread_id("t1", "review", "req-other") != child
    assert child_thread_id("t1", "legal", REQUEST).split("-")[-1] != child.split("-")[-1]
    assert REQUEST not in child


def test_keys_are_checked_and_ids_kept_within_the_limit() -> None:
    for bad in ("", "a/b"):
        with pytest.raises(DelegationError):
            child_thread_id("t1", bad, REQUEST)
    limits = InputLimits(max_id_length=40)
    assert len(child_thread_id("p" * 16, "review", REQUEST, limits)) == 40
    with pytest.raises(RunFailedError) as caught:
        child_thread_id("p" * 17, "review", REQUEST, limits)
    assert caught.value.code == "child_id_too_long"
    assert "41" in caught.value.message


def context(open_interrupts: Sequence[Interrupt] = (), **kw: Any) -> RunContext:
    answers = [resolved(i.id) for i in open_interrupts]
    runner, _ = runner_for(lambda *_: None, make_input("t1", "r1", resume=answers or None),
                           open_interrupts=open_interrupts, **kw)
    return RunContext(runner.port)


async def test_the_child_request_carries_the_parents_principal_and_derived_thread() -> None:
    ctx = context(request_id=REQUEST, principal="tenant-a")
    request = await Delegation(ctx, KafkaSettings()).request("pipeline_child", "review",
                                                             [{"id": "u", "role": "user",
                                                               "content": "check it"}])
    assert request.principal == "tenant-a"
    assert request.input.thread_id == child_thread_id("t1", "review", REQUEST)
    assert request.input.parent_run_id == "r1"
    assert request.input.run_id.startswith("r1/review-")


def test_a_resumed_parent_continues_the_child_its_interrupt_names() -> None:
    earlier = child_thread_id("t1", "review", "req-of-the-first-run")
    carried = Interrupt(id="review/sign-off", reason="sign_off", metadata={
        CHILD_METADATA: {"agent": "pipeline_child", "threadId": earlier, "runId": "c",
                         "interruptId": "sign-off"}})
    ctx = context([carried], request_id=REQUEST)
    assert Delegation(ctx, KafkaSettings()).child_thread("review") == earlier
    assert Delegation(ctx, KafkaSettings()).child_thread("legal") == child_thread_id(
        "t1", "legal", REQUEST)


def test_a_child_named_outside_the_parents_threads_is_not_followed() -> None:
    foreign = Interrupt(id="review/sign-off", reason="sign_off", metadata={
        CHILD_METADATA: {"threadId": "someone-else/review-0000000000000000"}})
    ctx = context([foreign], request_id=REQUEST)
    assert Delegation(ctx, KafkaSettings()).child_thread("review") == child_thread_id(
        "t1", "review", REQUEST)


async def test_a_child_run_id_over_the_limit_fails_the_parent_with_a_code() -> None:
    ctx = context(request_id=REQUEST)
    delegation = Delegation(ctx, KafkaSettings(), limits=InputLimits(max_id_length=30))
    with pytest.raises(RunFailedError) as caught:
        await delegation.request("pipeline_child", "a-rather-long-review-key")
    assert caught.value.code == "child_id_too_long"


def test_a_run_without_a_request_id_cannot_delegate() -> None:
    with pytest.raises(DelegationError):
        Delegation(context(), KafkaSettings()).child_thread("review")


async def test_a_child_request_too_large_for_a_record_is_not_sent() -> None:
    delegation = Delegation(context(request_id=REQUEST),
                            KafkaSettings(max_record_bytes=1024))  # type: ignore[call-arg]
    with pytest.raises(RecordTooLargeError) as caught:  # raised before any connection
        await delegation._publish("requests", "t1/review", b"x" * 5_000)
    assert caught.value.code == "child_request_too_large"


CHILD = "t1/review-0123456789abcdef"
MARKS = [(RUN_ID, b"c1"), (EVENT_TYPE, b"RUN_FINISHED"), (SEQ, b"4")]


def test_a_child_event_is_read_from_its_record() -> None:
    event = {"type": "RUN_FINISHED", "threadId": CHILD, "runId": "c1"}
    assert child_event(CHILD, CHILD.encode(), orjson.dumps(event), MARKS) == ChildEvent(
        b"c1", b"4", b"RUN_FINISHED", event)


@pytest.mark.parametrize(("key", "value", "headers"), [
    (CHILD.encode(), b"not json", MARKS),
    (CHILD.encode(), None, MARKS),  # a tombstone
    (CHILD.encode(), b"[1, 2]", MARKS),
    (CHILD.encode(), b'"RUN_FINISHED"', MARKS),
    (CHILD.encode(), b'{"type": "RUN_FINISHED"}', [("x-other-team", b"1")]),
    (CHILD.encode(), b'{"type": "RUN_FINISHED"}', [(RUN_ID, b"c1"), (SEQ, None)]),
    (b"t1/review-other", b'{"type": "RUN_FINISHED"}', MARKS),
    (None, b'{"type": "RUN_FINISHED"}', MARKS),
], ids=["not-json", "tombstone", "array", "string", "no-run-headers", "null-seq",
        "another-key", "no-key"])
def test_a_record_that_is_no_event_of_the_child_is_skipped(
        key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> None:
    """Anyone may write under a child's key: one such record failed every resume of the
    parent (JSONDecodeError, TypeError), and that RUN_ERROR lost the approval."""
    assert child_event(CHILD, key, value, headers) is None


def test_the_first_of_each_header_name_wins_as_everywhere() -> None:
    event = {"type": "TEXT_MESSAGE_END", "messageId": "m"}
    doubled = [(RUN_ID, b"c1"), (EVENT_TYPE, b"TEXT_MESSAGE_END"), (SEQ, b"2"),
               (RUN_ID, b"other"), (EVENT_TYPE, b"RUN_FINISHED"), (SEQ, b"9")]
    found = child_event(CHILD, CHILD.encode(), orjson.dumps(event), doubled)
    assert found == ChildEvent(b"c1", b"2", b"TEXT_MESSAGE_END", event)
