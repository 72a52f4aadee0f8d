"""A topic's ``max.message.bytes`` lowered (``kafka-configs``) under a running relay.

The services check the topics' limit against ``AGUI_MAX_RECORD_BYTES`` only when
they start, so a record between the two passes every check and is refused by the
broker. An event the agent streams over ``events``' new limit ends its run with a
``RUN_ERROR`` saying so (``event_too_large``, naming the topic and the setting),
written to ``runs`` and ``events`` as every run end is; the worker keeps serving,
the thread's partition included (its idempotent producer's sequence is not left
past the refused batch: ``services.kafka.refused_sequences``), and ``up`` with it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from faults.load import run_input
from faults.topic_configs import alter_topic

from hostile.client import Tenant, finished
from hostile.stack import TENANTS, UpStack, alive

pytestmark = pytest.mark.hostile


async def test_events_max_message_bytes_lowered_live(kafka_bootstrap: str,
                                                     tmp_path: Path) -> None:
    """An event over ``events``' lowered max.message.bytes ends its run RUN_ERROR
    ``event_too_large``; the worker and ``up`` keep running, and the next run of the
    same thread (same partition, which the worker had written before) finishes."""
    stack = UpStack(kafka_bootstrap, tmp_path)
    with stack.running():
        events = stack.settings.topics.events
        tid = f"limit-{uuid.uuid4().hex[:8]}"
        cut: str | None = None
        result = None
        async with Tenant(stack.url, TENANTS["tenant-a"]) as tenant:
            # a run first: the worker's producer has written the thread's partition (a
            # sequence the broker then holds it to), as any worker that ran a while has
            finished(await tenant.run("scripted", run_input(tid, f"{tid}-r0",
                                                            script={"text": "small"}),
                                      timeout_s=30), "success")
            await alter_topic(stack.settings, events, {"max.message.bytes": "4000"})
            try:
                result = await tenant.run("scripted", run_input(tid, f"{tid}-r1",
                                                                script={"text": "x" * 10_000}),
                                          timeout_s=30)
            except httpx.HTTPError as exc:  # the stream cut off mid-body
                cut = repr(exc)
            dead = [name for name, up in (("the producer worker",
                                           alive(stack.pids["producer"])),
                                          ("up", stack.process is not None
                                           and stack.process.poll() is None)) if not up]
            assert not dead, (
                f"{' and '.join(dead)} stopped after one event over {events}' "
                f"max.message.bytes; client got {cut or (result and result.events[-1:])}\n"
                + "\n".join(line[:300] for line in stack.output().splitlines()
                            if "critical" in line or "exited" in line))
            assert result is not None, cut
            assert result.ending is not None, result.events[-1:]
            assert result.ending["type"] == "RUN_ERROR", result.ending
            assert result.ending["code"] == "event_too_large", result.ending
            assert events in result.ending["message"], result.ending
            assert "max.message.bytes" in result.ending["message"], result.ending
            after = await tenant.run("scripted", run_input(tid, f"{tid}-r2",
                                                           script={"text": "small"}),
                                     timeout_s=30)
        finished(after, "success")
