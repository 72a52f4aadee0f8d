"""A failed delivery leaves a gap in an idempotent producer's sequence numbers: start again.

An idempotent producer numbers each partition's batches; the broker takes
a batch only if its number follows the last one it wrote for that producer.
aiokafka 0.14 gives a batch its number when it drains it, and a batch that
then fails (its partition had no leader until the delivery timeout,
``LeaderNotAvailableError``, as when a whole cluster comes back) keeps the
number it was given: every later batch of that partition is refused for
good (``OUT_OF_ORDER_SEQUENCE_NUMBER``), so a record written again after
such a failure could never be taken. The Java producer resets its producer
id in that case; aiokafka has no way to, for a producer without a
transactional id.

``restart`` does it: the producer forgets its id and its numbers, and its
sender asks the broker for a new id (``InitProducerId``) before it drains
another batch, which then starts at zero. Batches already drained keep the
id and number they were sent with; a restart never makes another batch
fail. What it gives up is the broker's deduplication of a batch sent under
the old id and again under the new one: the relay's readers drop such
copies by the record's own sequence number (``agui-seq``).
"""

from __future__ import annotations

import asyncio

from aiokafka.producer.transaction_manager import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PidAndEpoch,
)

from services.kafka.clients import AIOKafkaProducer


def restart(producer: AIOKafkaProducer) -> bool:
    """Have ``producer`` number its next batches from zero under a new producer id; False
    when it is not idempotent-only (a transactional id must keep its id) or is already
    waiting for a new one."""
    manager = producer._txn_manager
    if manager is None or manager.transactional_id is not None or not manager.has_pid():
        return False
    manager._pid_and_epoch = PidAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    manager._pid_waiter = asyncio.get_running_loop().create_future()
    manager._sequence_numbers.clear()
    return True
