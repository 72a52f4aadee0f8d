"""Record sizes around the broker's limit (findings 1 and 2, by size rather than by id).

A body under ``AGUI_MAX_BODY_BYTES`` becomes records larger than itself —
the RunRequest adds an envelope and a key, the dispatch a decision time,
the run's ``RUN_STARTED`` event repeats the input — so a body a few bytes
under the limit makes some record a few bytes over what the broker takes
(``AGUI_MAX_RECORD_BYTES``, 1 MiB). Whichever record that is, the answer
is a refusal or a run that ends (``413 payload_too_large`` at the edge, a
rejection, a ``RUN_ERROR`` saying the event did not fit) and never a
``5xx``, a hang or a retry loop. Records written straight onto
``requests`` at the broker's limit, with most of their bytes in the key or
in headers, are refused or dead-lettered the same way. Everything here
lands on one partition, and a normal run there afterwards proves it still
decides and the worker still serves.
"""

from __future__ import annotations

import orjson
import pytest
from faults.load import HttpRun, run_input

from hostile.client import Tenant, approval_flow, body_of, refused
from hostile.stack import UpStack
from hostile.topics import answer_to, envelope, publish, thread_on
from services.kafka.sizing import record_size

pytestmark = pytest.mark.hostile

LIMIT = 1_048_576
"""AGUI_MAX_BODY_BYTES and AGUI_MAX_RECORD_BYTES (their defaults, the broker's limit)."""
PARTITION = 5
UNDER = [0, 1, 64, 256, 512, 1024, 4096]
SIZE_CODES = {"payload_too_large", "invalid_input", "record_too_large"}
RUN_ERROR_CODES = {"event_too_large", "input_too_large", "checkpoint_too_large"}


def body_of_size(thread: str, run: str, size: int) -> bytes:
    wire = run_input(thread, run)
    wire["state"] = {"blob": ""}
    pad = size - len(body_of(wire))
    wire["state"] = {"blob": "x" * pad}
    body = body_of(wire)
    assert len(body) == size
    return body


def clear_end(result: HttpRun) -> str | None:
    """Why ``result`` is not a clear answer to an oversized input (None: it is)."""
    code = (result.problem or {}).get("code")
    if result.status in (400, 413) and code in SIZE_CODES:
        return None
    ending = result.ending
    if result.status == 200 and ending is not None:
        if ending["type"] == "RUN_FINISHED" or ending.get("code") in RUN_ERROR_CODES:
            return None
        return f"ended {ending.get('type')} {ending.get('code')}: {ending.get('message')}"
    return f"{result.status} {code or result.error}: {str(result.problem)[:200]}"


@pytest.mark.parametrize("under", UNDER)
async def test_a_body_just_under_the_limit_is_refused_or_ends_clearly(
        relay: UpStack, tenant_a: Tenant, under: int) -> None:
    thread = thread_on(PARTITION, relay.settings.partitions, f"under{under}")
    result = await tenant_a.run("scripted", body_of_size(thread, f"r-{thread}", LIMIT - under))
    why = clear_end(result)
    assert why is None, f"{LIMIT - under}-byte body: {why}"


async def test_a_body_one_byte_over_the_limit_is_413(relay: UpStack, tenant_a: Tenant) -> None:
    thread = thread_on(PARTITION, relay.settings.partitions, "over")
    result = await tenant_a.run("scripted", body_of_size(thread, f"r-{thread}", LIMIT + 1))
    refused(result, 413, "payload_too_large")


def record_at_limit(thread: str, headers: list[tuple[str, bytes]]) -> bytes:
    """A RunRequest on ``thread`` padded so that its record is exactly the broker's limit."""
    request = envelope(run_input(thread, f"r-{thread[:40]}"))
    key = thread.encode()
    pad = 0
    for _ in range(4):  # varint lengths: a few steps reach the exact size
        request["input"]["state"] = {"blob": "x" * pad}
        pad += LIMIT - record_size(key, orjson.dumps(request), headers)
    request["input"]["state"] = {"blob": "x" * pad}
    value = orjson.dumps(request)
    assert record_size(key, value, headers) == LIMIT
    return value


@pytest.mark.parametrize("shape", ["value", "key", "headers"])
async def test_a_request_record_at_the_broker_limit_leaves_its_partition_deciding(
        relay: UpStack, tenant_a: Tenant, shape: str) -> None:
    settings = relay.settings
    tag = "big" + "k" * (300_000 if shape == "key" else 0)
    thread = thread_on(PARTITION, settings.partitions, tag)
    headers = [(f"x-hostile-{i}", b"h" * 180_000) for i in range(5)] if shape == "headers" \
        else [("x-hostile", b"h")]
    value = record_at_limit(thread, headers)
    where = await publish(settings, settings.topics.requests, thread.encode(), value, headers)
    assert where[0] == PARTITION
    await approval_flow(tenant_a, thread_on(PARTITION, settings.partitions, f"after-{shape}"))
    answer = await answer_to(settings, orjson.loads(value)["requestId"], where, 10.0)
    assert answer is not None, f"requests p{where[0]}@{where[1]}: no decision, no dead letter"
    relay.check_alive()
