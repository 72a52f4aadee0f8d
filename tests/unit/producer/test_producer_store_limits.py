"""A checkpoint change whose record would not fit is refused before it is sent or cached."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

import pytest
from ag_ui.core import Interrupt

from services.kafka.clients import AIOKafkaProducer
from services.producer import checkpoint as cp
from services.producer.errors import RecordTooLargeError
from services.producer.store import CheckpointStore
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def store() -> CheckpointStore:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9", topic_prefix="p",
                             max_record_bytes=4096)  # type: ignore[call-arg]
    # No producer: the refusal happens before anything is sent.
    return CheckpointStore(settings, cast(AIOKafkaProducer, None))


def opening(count: int, run_id: str = "r" * 200) -> cp.ThreadCheckpoint:
    interrupts = [Interrupt(id=f"i-{n}", reason="approval") for n in range(count)]
    return cp.begin_run(cp.fresh("t"), run_id=run_id, request_id="q", agent="a", worker="w",
                        still_open=interrupts, now=NOW)


async def test_an_oversized_checkpoint_is_refused_and_the_cache_kept() -> None:
    checkpoints = store()
    assert checkpoints.excess("t", lambda _: opening(2)) is None
    assert (checkpoints.excess("t", lambda _: opening(40)) or 0) > 4096
    with pytest.raises(RecordTooLargeError) as caught:
        await checkpoints.write("t", lambda _: opening(40))
    assert caught.value.code == "checkpoint_too_large"
    assert "4096" in caught.value.message
    assert checkpoints.known("t") is None
