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

import pytest
from ag_ui.core import Interrupt
from producer_support import make_input, resolved, runner_for

from contracts.limits import InputLimits
from services.producer.context import RunContext
from services.producer.delegation import (
    CHILD_METADATA,
    Delegation,
    DelegationError,
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
